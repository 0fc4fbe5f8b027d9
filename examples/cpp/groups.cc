// The rank_list example: rank r holds r + 1 and runs allreduce (sum) within the groups of several
// rank_lists; rank 0 gathers every rank's result and prints one row per rank_list. Ranks that no
// group lists run standalone (a group of one). Then it prints each rank's communicator attributes
// for the rank_list {{1, 2, 3}, {0}}.
//
//   chorusrun -np 4 build/bin/groups
//   (two nodes: one `chorusrun --nnodes 2 --node-rank I --master HOST:PORT --nproc-per-node 2
//   build/bin/groups` per node, one CHORUS_JOB_TOKEN; local rank/size then count members per node)
//
// Expected on 4 ranks:
//   rank_list                | r0 | r1 | r2 | r3
//   (world)                  | 10 | 10 | 10 | 10
//   [[0,1,2,3]]              | 10 | 10 | 10 | 10
//   [[0,1],[2,3]]            |  3 |  3 |  7 |  7
//   [[0,1,2],[3]]            |  6 |  6 |  6 |  4
//   [[0,1,2]]                |  6 |  6 |  6 |  4
#include <cstdio>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace {

std::string describe(const chorus::RankList& rankList) {
  if (rankList.empty())
    return "(world)";
  std::string text = "[";
  for (size_t g = 0; g < rankList.size(); ++g) {
    text += g ? ",[" : "[";
    for (size_t i = 0; i < rankList[g].size(); ++i)
      text += (i ? "," : "") + std::to_string(rankList[g][i]);
    text += "]";
  }
  return text + "]";
}

// Sum of (r + 1) over the members of world rank `rank`'s group (a reference loop, not chorus).
float expectedSum(const chorus::RankList& rankList, int size, int rank) {
  if (rankList.empty())
    return size * (size + 1) / 2.0f;
  for (const auto& group : rankList) {
    float sum = 0;
    bool mine = false;
    for (int r : group) {
      sum += r + 1;
      mine = mine || r == rank;
    }
    if (mine)
      return sum;
  }
  return rank + 1.0f;  // in no group: standalone
}

// Gathers one int vector per rank on world rank 0 (rank-major); empty elsewhere.
std::vector<int> gatherInts(chorus::Communicator& world, std::vector<int> mine) {
  std::vector<int> all(world.rank() == 0 ? mine.size() * world.size() : 0);
  world
      .gather(chorus::Tensor(mine.data(), {static_cast<int64_t>(mine.size())}),
              chorus::Tensor(all.data(), {static_cast<int64_t>(all.size())}), 0)
      ->wait();
  return all;
}

bool seedTable(chorus::Communicator& world) {
  const int n = world.size();
  const std::vector<chorus::RankList> lists = {
      {}, {{0, 1, 2, 3}}, {{0, 1}, {2, 3}}, {{0, 1, 2}, {3}}, {{0, 1, 2}}};
  if (world.rank() == 0) {
    std::printf("allreduce(sum) of r + 1 within each rank_list's groups (%d ranks)\n\n", n);
    std::printf("  %-16s |", "rank_list");
    for (int r = 0; r < n; ++r) std::printf(" r%-2d |", r);
    std::printf("\n");
  }
  bool ok = true;
  for (const auto& rankList : lists) {
    auto comm = chorus::DistContext::get().communicator(rankList);
    std::vector<float> value = {static_cast<float>(world.rank() + 1)};
    comm->allreduce(chorus::Tensor(value.data(), {1}))->wait();
    auto all = gatherInts(world, {static_cast<int>(value[0])});
    if (world.rank() != 0)
      continue;
    std::printf("  %-16s |", describe(rankList).c_str());
    for (int r = 0; r < n; ++r) {
      std::printf(" %3d |", all[r]);
      ok = ok && all[r] == expectedSum(rankList, n, r);
    }
    std::printf("\n");
  }
  if (world.rank() == 0)
    std::printf("\nseed table: %s\n\n", ok ? "OK" : "WRONG");
  return ok;
}

void attributeTable(chorus::Communicator& world) {
  auto comm = chorus::DistContext::get().communicator({{1, 2, 3}, {0}});
  auto all = gatherInts(world, {comm->rank(), comm->size(), comm->localRank(), comm->localSize(),
                                comm->groupId(), comm->groupSize()});
  if (world.rank() != 0)
    return;
  std::printf("attributes for rank_list [[1,2,3],[0]]\n\n");
  std::printf("  rank | sub rank/size | local rank/size | group_id/size\n");
  for (int r = 0; r < world.size(); ++r) {
    const int* a = &all[6 * r];
    std::printf("  %4d | %8d/%-4d | %10d/%-4d | %8d/%-4d\n", r, a[0], a[1], a[2], a[3], a[4], a[5]);
  }
}

}  // namespace

int main() {
  try {
    auto world = chorus::DistContext::get().communicator();
    if (world->size() != 4) {
      if (world->rank() == 0)
        std::fprintf(stderr, "the groups example needs 4 ranks: chorusrun -np 4 groups\n");
      return 2;
    }
    const bool ok = seedTable(*world);
    attributeTable(*world);
    return ok ? 0 : 1;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "groups example failed: %s\n", e.what());
    return 1;
  }
}
