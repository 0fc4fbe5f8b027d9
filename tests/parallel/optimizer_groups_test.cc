// OptimizerGroups (src/parallel/optimizer_groups.h): the runs of a rank's shard that one group's
// update covers, worked out by hand on small layouts, and its refusals.
#include "parallel/optimizer_groups.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

using Runs = std::vector<std::tuple<int64_t, int64_t, int>>;  // offset, numel, group

Runs runsOf(const OptimizerGroups& groups, int unit) {
  Runs runs;
  for (const OptimizerRun& run : groups.runs(unit))
    runs.emplace_back(run.offset, run.numel, run.group);
  return runs;
}

// Parameters of 3, 5 and 2 elements in one unit on 2 ranks, shards aligned to 4: each shard is 8
// elements. Rank 0 holds parameter 0 (0-2) and 1 (3-7); rank 1 parameter 2 (0-1), then padding.
ZeroLayout oneUnit(int rank) { return ZeroLayout({3, 5, 2}, {{0, 1, 2}}, 2, rank, 4); }

TEST(OptimizerGroups, OneGroupUpdatesEachUnitsWholeShard) {
  for (int rank : {0, 1}) {
    OptimizerGroups groups(oneUnit(rank), {});
    EXPECT_EQ(groups.count(), 1);
    EXPECT_EQ(runsOf(groups, 0), (Runs{{0, 8, 0}}));  // padding included: one call a unit
  }
}

TEST(OptimizerGroups, SeveralGroupsRunOverTheirOwnPiecesOnly) {
  OptimizerGroups rank0(oneUnit(0), {0, 1, 1});
  EXPECT_EQ(runsOf(rank0, 0), (Runs{{0, 3, 0}, {3, 5, 1}}));
  OptimizerGroups rank1(oneUnit(1), {0, 1, 1});
  EXPECT_EQ(runsOf(rank1, 0), (Runs{{0, 2, 1}}));  // no padding
  OptimizerGroups swapped(oneUnit(0), {1, 0, 1});
  EXPECT_EQ(runsOf(swapped, 0), (Runs{{0, 3, 1}, {3, 5, 0}}));
}

TEST(OptimizerGroups, NeighboursOfOneGroupMergeWithinAUnit) {
  // Unit 0: parameter 0 (3 elements), shards of 2; unit 1: parameters 1 and 2 (5 + 2), shards
  // of 4. Rank 1 holds element 2 of parameter 0, then element 4 of parameter 1 and parameter 2.
  ZeroLayout layout({3, 5, 2}, {{0}, {1, 2}}, 2, 1, 1);
  OptimizerGroups split(layout, {0, 1, 0});
  EXPECT_EQ(runsOf(split, 0), (Runs{{0, 1, 0}}));
  EXPECT_EQ(runsOf(split, 1), (Runs{{0, 1, 1}, {1, 2, 0}}));
  OptimizerGroups merged(layout, {1, 0, 0});
  EXPECT_EQ(runsOf(merged, 1), (Runs{{0, 3, 0}}));
}

TEST(OptimizerGroups, BadGroupsAreRefused) {
  EXPECT_THROW(OptimizerGroups(oneUnit(0), {0, 1}), InvalidArgumentError);      // 2 for 3
  EXPECT_THROW(OptimizerGroups(oneUnit(0), {0, -1, 0}), InvalidArgumentError);  // negative
  EXPECT_THROW(OptimizerGroups(oneUnit(0), {0, 2, 0}), InvalidArgumentError);   // 1 is empty
  OptimizerGroups groups(oneUnit(0), {0, 1, 1});
  EXPECT_THROW(groups.set(2, {}, {}), InvalidArgumentError);
  groups.set(0, {}, {});
  EXPECT_THROW(groups.requireSet(), InvalidArgumentError);  // group 1 has no hyperparameters
  groups.set(1, {}, {});
  EXPECT_NO_THROW(groups.requireSet());
}

}  // namespace
}  // namespace chorus::parallel
