// groups_check: the rank_list contract of DistContext::communicator, checked on 4 real ranks.
//
//   chorusrun -np 4 groups_check            (one node)
//   groups_check --nodes 2                  (4 ranks on 2 simulated nodes; see two_nodes.py)
//
// Checks: the seed grouping table, the attribute table of {{1, 2, 3}, {0}}, allgather and
// reduce_scatter within groups (closed forms), argument errors, and the communicator pool (same
// object, no new rendezvous). Each rank prints its values; every rank counts its failures, and rank
// 0 prints "groups_check: PASSED" only when the world-wide count is zero. Exit status 0 = passed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "group_tables.h"

namespace {

using chorus::Communicator;
using chorus::DistContext;
using chorus::RankList;
using chorus::Tensor;
namespace ct = chorus::testing;

int failures = 0;
int worldRank = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL rank %d: %s\n", worldRank, what.c_str());
  }
}

void checkSeedTable() {
  for (const auto& row : ct::seedTable()) {
    auto comm = DistContext::get().communicator(row.rankList);
    std::vector<int32_t> value = {worldRank + 1};
    comm->allreduce(Tensor(value.data(), {1}))->wait();
    const int expected = row.sums[worldRank];
    std::printf("seed rank %d rank_list %s -> %d (expected %d)\n", worldRank,
                ct::toString(row.rankList).c_str(), value[0], expected);
    check(value[0] == expected, "seed table row " + ct::toString(row.rankList));
  }
}

void checkAttributes(int nodes) {
  auto comm = DistContext::get().communicator(ct::kAttributeRankList);
  const ct::Attributes got = {comm->rank(),      comm->size(),    comm->localRank(),
                              comm->localSize(), comm->groupId(), comm->groupSize()};
  const auto& table = nodes == 2 ? ct::kTwoNodeAttributes : ct::kOneNodeAttributes;
  std::printf("attributes rank %d: %s (expected %s)\n", worldRank, ct::toString(got).c_str(),
              ct::toString(table[worldRank]).c_str());
  check(got == table[worldRank], "attribute table");
  check(comm->worldRank() == worldRank && comm->worldSize() == 4, "world rank/size");
}

// allgather: member m contributes {100m, 100m + 1}; the result is those pairs in group order.
// reduce_scatter: member m contributes x[j] = 10m + j (j < 2 * size); sub rank s receives
// x[2s + k] summed = 10 * sum(members) + size * (2s + k).
void checkDataMovement(const RankList& rankList) {
  const auto members = ct::groupOf(rankList, 4, worldRank);
  const int n = static_cast<int>(members.size());
  auto comm = DistContext::get().communicator(rankList);
  const std::string name = ct::toString(rankList);

  std::vector<int64_t> in = {100 * worldRank, 100 * worldRank + 1};
  std::vector<int64_t> out(2 * n, -1);
  comm->allgather(Tensor(in.data(), {2}), Tensor(out.data(), {2 * n}))->wait();
  std::vector<int64_t> expected;
  for (int m : members) expected.insert(expected.end(), {100 * m, 100 * m + 1});
  check(out == expected, "allgather within " + name);

  std::vector<double> x(2 * n);
  for (int j = 0; j < 2 * n; ++j) x[j] = 10.0 * worldRank + j;
  std::vector<double> chunk(2, -1);
  comm->reduceScatter(Tensor(x.data(), {2 * n}), Tensor(chunk.data(), {2}))->wait();
  double memberSum = 0;
  for (int m : members) memberSum += m;
  const int s = comm->rank();
  for (int k = 0; k < 2; ++k) {
    check(chunk[k] == 10.0 * memberSum + n * (2.0 * s + k),
          "reduce_scatter within " + name + " element " + std::to_string(k));
  }
  std::printf("data movement rank %d rank_list %s: allgather/reduce_scatter checked\n", worldRank,
              name.c_str());
}

template <typename Fn>
void expectInvalid(Fn fn, const std::string& needle, const std::string& what) {
  try {
    fn();
    check(false, what + ": no error");
  } catch (const chorus::InvalidArgumentError& e) {
    check(needle.empty() || std::strstr(e.what(), needle.c_str()) != nullptr,
          what + ": message lacks \"" + needle + "\": " + e.what());
  }
}

// Every rank makes the same bad calls; each fails on the calling rank before any communication.
void checkErrors() {
  auto& context = DistContext::get();
  expectInvalid(
      [&] {
        context.communicator({{0, 1}, {1, 2}});
      },
      "Each rank can only appear on rank_list once", "rank in two groups");
  expectInvalid(
      [&] {
        context.communicator({{0, 0}});
      },
      "Each rank can only appear on rank_list once", "rank twice in a group");
  expectInvalid([&] { context.communicator({{0, 4}}); }, "", "rank 4 of 4");
  expectInvalid([&] { context.communicator({{-1, 0}}); }, "", "rank -1");
  expectInvalid([&] { context.communicator({{0, 1}, {}}); }, "", "empty group");
  auto pair = context.communicator({{0, 1}, {2, 3}});
  std::vector<float> value = {1};
  expectInvalid([&] { pair->broadcast(Tensor(value.data(), {1}), 2); }, "",
                "broadcast root outside the group");
  expectInvalid([&] { pair->reduce(Tensor(value.data(), {1}), -1); }, "",
                "reduce root outside the group");
  std::printf("errors rank %d: checked\n", worldRank);
}

// The pool: the same (normalized) rank_list gives the same object. Rank 0 alone then asks again: a
// rendezvous would need the other ranks (and would put a split on the world communicator, which
// the world barrier below would reject as a mismatch), so returning at all shows there was none.
void checkPool(Communicator& world) {
  auto& context = DistContext::get();
  auto first = context.communicator({{0, 1}, {2, 3}});
  check(context.communicator({{0, 1}, {2, 3}}) == first, "same rank_list, same communicator");
  check(context.communicator({{0, 1, 2}}) == context.communicator({{0, 1, 2}, {3}}),
        "{{0,1,2}} and {{0,1,2},{3}} share one communicator");
  check(context.communicator({}) == context.communicator(), "the world is cached");
  if (worldRank == 0) {
    for (int i = 0; i < 3; ++i)
      check(context.communicator({{0, 1}, {2, 3}}) == first, "non-collective cached lookup");
  }
  world.barrier()->wait();
  std::printf("pool rank %d: checked\n", worldRank);
}

int run(int nodes) {
  auto world = DistContext::get().communicator();
  worldRank = world->rank();
  if (world->size() != 4) {
    std::printf("FAIL rank %d: groups_check needs 4 ranks, got %d\n", worldRank, world->size());
    return 2;
  }
  checkSeedTable();
  checkAttributes(nodes);
  checkDataMovement({{0, 1}, {2, 3}});
  checkDataMovement({{3, 1, 2}, {0}});  // group order differs from rank order
  checkDataMovement({{0, 1, 2}});       // rank 3 standalone
  checkErrors();
  checkPool(*world);
  std::vector<int32_t> total = {failures};
  world->allreduce(Tensor(total.data(), {1}))->wait();
  if (worldRank == 0 && total[0] == 0)
    std::printf("groups_check: PASSED on 4 ranks, %d node(s)\n", nodes);
  std::fflush(stdout);
  return total[0] == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 1;
  if (argc == 3 && std::strcmp(argv[1], "--nodes") == 0)
    nodes = std::atoi(argv[2]);
  try {
    return run(nodes);
  } catch (const chorus::Error& e) {
    std::printf("FAIL rank %d: %s\n", worldRank, e.what());
    std::fflush(stdout);
    return 1;
  }
}
