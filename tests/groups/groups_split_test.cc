// rank_list groups in-process: 4 threads, each with a world communicator (harness runRanks), carve
// groups out with Communicator::split the way DistContext::communicator does for a rank_list
// (color = index of the caller's group in the completed partition, key = its position there).
// Simulated nodes (RankOptions::nodeIds) give the two-node attribute table without a launcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "group_tables.h"
#include "harness/run_ranks.h"

namespace chorus::testing {
namespace {

// The caller's communicator for `rankList`; unlisted ranks follow the listed groups, one each, in
// ascending order (as DistContext completes a rank_list).
std::shared_ptr<Communicator> groupCommunicator(Communicator& world, const RankList& rankList) {
  RankList groups = rankList;
  for (int r = 0; r < world.size(); ++r) {
    bool listed = false;
    for (const auto& g : rankList) listed = listed || std::find(g.begin(), g.end(), r) != g.end();
    if (!listed)
      groups.push_back({r});
  }
  for (int color = 0; color < static_cast<int>(groups.size()); ++color) {
    const auto& g = groups[color];
    auto at = std::find(g.begin(), g.end(), world.rank());
    if (at != g.end())
      return world.split(color, static_cast<int>(at - g.begin()));
  }
  return nullptr;
}

TEST(GroupsSplit, SeedTable) {
  runRanks(4, [](Communicator& world) {
    for (const auto& row : seedTable()) {
      auto comm = row.rankList.empty() ? nullptr : groupCommunicator(world, row.rankList);
      Communicator& c = comm ? *comm : world;
      std::vector<int32_t> value = {world.rank() + 1};
      c.allreduce(Tensor(value.data(), {1}))->wait();
      EXPECT_EQ(value[0], row.sums[world.rank()])
          << "rank " << world.rank() << " rank_list " << toString(row.rankList);
    }
  });
}

void expectAttributes(const std::vector<std::string>& nodeIds,
                      const std::array<Attributes, 4>& table) {
  RankOptions options;
  options.nodeIds = nodeIds;
  runRanks(
      4,
      [&table](Communicator& world) {
        auto comm = groupCommunicator(world, kAttributeRankList);
        ASSERT_NE(comm, nullptr);
        const Attributes got = {comm->rank(),      comm->size(),    comm->localRank(),
                                comm->localSize(), comm->groupId(), comm->groupSize()};
        EXPECT_EQ(toString(got), toString(table[world.rank()])) << "rank " << world.rank();
        EXPECT_EQ(comm->worldRank(), world.rank());
        EXPECT_EQ(comm->rootRank(), world.rank() == 0 ? 0 : 1);
      },
      options);
}

TEST(GroupsSplit, AttributeTableTwoNodes) {
  expectAttributes({"a", "a", "b", "b"}, kTwoNodeAttributes);
}

TEST(GroupsSplit, AttributeTableOneNode) {
  expectAttributes({"a", "a", "a", "a"}, kOneNodeAttributes);
}

// allgather: member m contributes {100m, 100m + 1}, gathered in group order. reduce_scatter: member
// m contributes x[j] = 10m + j; sub rank s gets 10 * sum(members) + size * (2s + k).
TEST(GroupsSplit, AllgatherAndReduceScatterWithinGroups) {
  const std::vector<RankList> lists = {{{0, 1}, {2, 3}}, {{3, 1, 2}, {0}}, {{0, 1, 2}}};
  runRanks(4, [&lists](Communicator& world) {
    const int me = world.rank();
    for (const auto& rankList : lists) {
      auto comm = groupCommunicator(world, rankList);
      const auto members = groupOf(rankList, 4, me);
      const int n = static_cast<int>(members.size());
      ASSERT_EQ(comm->size(), n);

      std::vector<int64_t> in = {100 * me, 100 * me + 1};
      std::vector<int64_t> out(2 * n, -1);
      comm->allgather(Tensor(in.data(), {2}), Tensor(out.data(), {2 * n}))->wait();
      std::vector<int64_t> expected;
      for (int m : members) expected.insert(expected.end(), {100 * m, 100 * m + 1});
      EXPECT_EQ(out, expected) << "rank " << me << " " << toString(rankList);

      std::vector<float> x(2 * n);
      for (int j = 0; j < 2 * n; ++j) x[j] = 10.0f * me + j;
      std::vector<float> chunk(2, -1);
      comm->reduceScatter(Tensor(x.data(), {2 * n}), Tensor(chunk.data(), {2}))->wait();
      float memberSum = 0;
      for (int m : members) memberSum += m;
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(chunk[k], 10.0f * memberSum + n * (2.0f * comm->rank() + k))
            << "rank " << me << " " << toString(rankList) << " element " << k;
      }
    }
  });
}

}  // namespace
}  // namespace chorus::testing
