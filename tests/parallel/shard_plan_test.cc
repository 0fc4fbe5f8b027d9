// ShardPlan: the flat parameter space cut into equal, aligned shards, and the pieces that map
// parameters to shards, checked element by element against a direct walk of the flat space.
#include "chorus/shard_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

// For every flat element, (parameter, element within it), or (-1, -1) for padding; computed by
// walking the parameters, independently of the plan's search.
std::vector<std::pair<int, int64_t>> owners(const std::vector<int64_t>& numels, int64_t padded) {
  std::vector<std::pair<int, int64_t>> out;
  for (size_t p = 0; p < numels.size(); ++p)
    for (int64_t i = 0; i < numels[p]; ++i) out.push_back({static_cast<int>(p), i});
  while (static_cast<int64_t>(out.size()) < padded) out.push_back({-1, -1});
  return out;
}

void expectConsistent(const std::vector<int64_t>& numels, int shards, int64_t align) {
  ShardPlan plan(numels, shards, align);
  int64_t total = 0;
  for (auto n : numels) total += n;
  ASSERT_EQ(plan.totalNumel(), total);
  EXPECT_EQ(plan.shardNumel() % align, 0);
  EXPECT_GE(plan.paddedNumel(), total);
  EXPECT_LT(plan.paddedNumel() - total, shards * align);
  auto expected = owners(numels, plan.paddedNumel());
  std::vector<std::pair<int, int64_t>> seen(plan.paddedNumel(), {-1, -1});
  std::vector<ShardPiece> allPieces;
  for (int r = 0; r < shards; ++r) {
    int64_t previousEnd = 0;
    for (const auto& piece : plan.piecesOf(r)) {
      EXPECT_EQ(piece.shard, r);
      EXPECT_GE(piece.shardOffset, previousEnd);  // in flat order, no overlap
      previousEnd = piece.shardOffset + piece.numel;
      EXPECT_LE(previousEnd, plan.shardNumel());
      for (int64_t i = 0; i < piece.numel; ++i) {
        auto& slot = seen[plan.shardBegin(r) + piece.shardOffset + i];
        EXPECT_EQ(slot.first, -1) << "element covered twice";
        slot = {piece.parameter, piece.parameterOffset + i};
      }
      allPieces.push_back(piece);
    }
  }
  EXPECT_EQ(seen, expected);
  // rangesOf lists the same pieces, grouped by parameter.
  std::vector<ShardPiece> byParameter;
  for (int p = 0; p < plan.parameterCount(); ++p)
    for (const auto& piece : plan.rangesOf(p)) byParameter.push_back(piece);
  EXPECT_EQ(byParameter, allPieces);
}

TEST(ShardPlanTest, EveryElementLandsInExactlyOneShard) {
  std::vector<int64_t> numels = {1000, 7, 0, 333, 4096, 1, 250};
  for (int shards : {1, 2, 3, 4, 7})
    for (int64_t align : {1, 16, 64}) expectConsistent(numels, shards, align);
}

TEST(ShardPlanTest, ShardsAreEqualPaddedAndAligned) {
  ShardPlan plan({10, 20, 5}, 4, 16);  // 35 elements: 9 per shard, rounded up to 16
  EXPECT_EQ(plan.shardNumel(), 16);
  EXPECT_EQ(plan.paddedNumel(), 64);
  EXPECT_EQ(plan.shardBegin(3), 48);
  EXPECT_TRUE(plan.piecesOf(3).empty());  // padding only
  EXPECT_EQ(plan.piecesOf(0), (std::vector<ShardPiece>{{0, 0, 0, 0, 10}, {1, 0, 0, 10, 6}}));
  EXPECT_EQ(plan.rangesOf(1), (std::vector<ShardPiece>{{1, 0, 0, 10, 6}, {1, 1, 6, 0, 14}}));
  // Parameter 2 is flat elements 30..34: the last two of shard 1, the first three of shard 2.
  EXPECT_EQ(plan.rangesOf(2), (std::vector<ShardPiece>{{2, 1, 0, 14, 2}, {2, 2, 2, 0, 3}}));
}

TEST(ShardPlanTest, OneShardHoldsEverythingAndAnEmptyModelHasNoPieces) {
  ShardPlan one({3, 4}, 1, 1);
  EXPECT_EQ(one.shardNumel(), 7);
  EXPECT_EQ(one.piecesOf(0).size(), 2u);
  ShardPlan empty({}, 4);
  EXPECT_EQ(empty.paddedNumel(), 0);
  EXPECT_TRUE(empty.piecesOf(2).empty());
}

TEST(ShardPlanTest, BadArgumentsAreRefused) {
  EXPECT_THROW(ShardPlan({1}, 0), InvalidArgumentError);
  EXPECT_THROW(ShardPlan({1, -2}, 2), InvalidArgumentError);
  EXPECT_THROW(ShardPlan({1}, 2, 0), InvalidArgumentError);
  EXPECT_THROW(ShardPlan({1}, 2).piecesOf(2), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::parallel
