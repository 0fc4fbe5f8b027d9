// ZeroLayout and planUnits: every parameter element owned by exactly one rank, shard offsets and
// unit offsets checked against a direct walk of the units, bad arguments refused, and the unit
// grouping of planUnits checked on small cases worked out by hand.
#include "chorus/zero_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

using Units = std::vector<std::vector<int>>;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest multiple of `align` that covers `total` elements in `shards` equal shards.
int64_t expectedShardNumel(int64_t total, int shards, int64_t align) {
  return ceilDiv(ceilDiv(total, shards), align) * align;
}

int64_t unitTotal(const std::vector<int64_t>& numels, const std::vector<int>& unit) {
  int64_t total = 0;
  for (int parameter : unit) total += numels[parameter];
  return total;
}

// Checks one rank's layout against a direct walk of the units and counts, into `coverage`, how
// often each parameter element appears in this rank's owned pieces.
void checkRank(const std::vector<int64_t>& numels,
               const Units& units,
               int shards,
               int rank,
               int64_t align,
               std::vector<std::vector<int>>& coverage) {
  ZeroLayout layout(numels, units, shards, rank, align);
  ASSERT_EQ(layout.numUnits(), static_cast<int>(units.size()));
  ASSERT_EQ(layout.numParameters(), static_cast<int>(numels.size()));
  EXPECT_EQ(layout.shardCount(), shards);
  EXPECT_EQ(layout.rank(), rank);
  EXPECT_EQ(layout.totalNumel(), std::accumulate(numels.begin(), numels.end(), int64_t{0}));

  int64_t prefix = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    EXPECT_EQ(layout.unitParameters(u), units[u]);
    int64_t shardNumel = expectedShardNumel(unitTotal(numels, units[u]), shards, align);
    EXPECT_EQ(layout.plan(u).shardNumel(), shardNumel) << "unit " << u;
    EXPECT_EQ(layout.shardOffset(u), prefix) << "unit " << u;
    prefix += shardNumel;
    int64_t packed = 0;  // the unit's parameters back to back, in the unit's order
    for (int parameter : units[u]) {
      EXPECT_EQ(layout.unitOf(parameter), u);
      EXPECT_EQ(layout.offsetInUnit(parameter), packed) << "parameter " << parameter;
      packed += numels[parameter];
    }
  }
  EXPECT_EQ(layout.shardNumel(), prefix);

  int64_t owned = 0;
  int64_t previousEnd = 0;
  for (const OwnedPiece& piece : layout.ownedPieces()) {
    ASSERT_GE(piece.parameter, 0);
    ASSERT_LT(piece.parameter, static_cast<int>(numels.size()));
    ASSERT_GT(piece.numel, 0);
    ASSERT_LE(piece.parameterOffset + piece.numel, numels[piece.parameter]);
    EXPECT_GE(piece.shardOffset, previousEnd) << "pieces in flat order, not overlapping";
    previousEnd = piece.shardOffset + piece.numel;
    // The piece's place in the unit's flat space must be inside this rank's shard of the unit,
    // at the same distance from the shard's start as from this unit's part of the whole shard.
    int u = layout.unitOf(piece.parameter);
    int64_t unitShard = expectedShardNumel(unitTotal(numels, units[u]), shards, align);
    int64_t flat = layout.offsetInUnit(piece.parameter) + piece.parameterOffset;
    EXPECT_EQ(flat - rank * unitShard, piece.shardOffset - layout.shardOffset(u));
    EXPECT_GE(piece.shardOffset, layout.shardOffset(u));
    EXPECT_LE(piece.shardOffset + piece.numel, layout.shardOffset(u) + unitShard);
    for (int64_t i = 0; i < piece.numel; ++i)
      ++coverage[piece.parameter][piece.parameterOffset + i];
    owned += piece.numel;
  }
  EXPECT_EQ(layout.ownedNumel(), owned);
}

void expectCoveredOnce(const std::vector<int64_t>& numels, const Units& units, int64_t align) {
  for (int shards = 1; shards <= 5; ++shards) {
    std::vector<std::vector<int>> coverage;
    for (int64_t n : numels) coverage.emplace_back(n, 0);
    for (int rank = 0; rank < shards; ++rank) {
      SCOPED_TRACE("shards " + std::to_string(shards) + " rank " + std::to_string(rank) +
                   " align " + std::to_string(align));
      checkRank(numels, units, shards, rank, align, coverage);
    }
    for (size_t p = 0; p < numels.size(); ++p)
      for (int64_t i = 0; i < numels[p]; ++i)
        ASSERT_EQ(coverage[p][i], 1)
            << "parameter " << p << " element " << i << " with " << shards << " shards";
  }
}

TEST(ZeroLayoutTest, OwnedPiecesCoverEveryElementOnceAcrossRanks) {
  for (int64_t align : {1, 16, 32}) {
    expectCoveredOnce({100, 7, 33, 1, 250, 64}, {{5, 4}, {3, 2, 1}, {0}}, align);
    expectCoveredOnce({10, 20, 5}, {{0, 1, 2}}, align);
    expectCoveredOnce({10, 20, 5}, {{2, 0}, {1}}, align);  // a unit out of registration order
    expectCoveredOnce({1000}, {{0}}, align);
    expectCoveredOnce({3, 0, 40}, {{2}, {1, 0}}, align);  // an empty parameter among others
  }
}

TEST(ZeroLayoutTest, SmallCaseByHand) {
  // Unit 0 = parameters 1 (20) and 0 (10): 30 elements in 4 shards of 8 (align 8), so rank 1
  // holds parameter 1's elements 8..15. Unit 1 = parameter 2 (5): shards of 8, rank 1 only padding.
  ZeroLayout layout({10, 20, 5}, {{1, 0}, {2}}, 4, 1, 8);
  EXPECT_EQ(layout.offsetInUnit(1), 0);
  EXPECT_EQ(layout.offsetInUnit(0), 20);
  EXPECT_EQ(layout.offsetInUnit(2), 0);
  EXPECT_EQ(layout.shardOffset(0), 0);
  EXPECT_EQ(layout.shardOffset(1), 8);
  EXPECT_EQ(layout.shardNumel(), 16);
  EXPECT_EQ(layout.ownedNumel(), 8);
  EXPECT_EQ(layout.ownedPieces(), (std::vector<OwnedPiece>{{1, 8, 8, 0}}));
  ZeroLayout last({10, 20, 5}, {{1, 0}, {2}}, 4, 3, 8);
  // Rank 3: unit 0 elements 24..29 = parameter 0's 4..9; unit 1 elements 24..31: padding.
  EXPECT_EQ(last.ownedPieces(), (std::vector<OwnedPiece>{{0, 4, 6, 0}}));
  ZeroLayout first({10, 20, 5}, {{1, 0}, {2}}, 4, 0, 8);
  EXPECT_EQ(first.ownedPieces(), (std::vector<OwnedPiece>{{1, 0, 8, 0}, {2, 0, 5, 8}}));
}

TEST(ZeroLayoutTest, BadArgumentsAreRefused) {
  std::vector<int64_t> numels = {4, 5, 6};
  EXPECT_THROW(ZeroLayout(numels, {{0, 1}, {1, 2}}, 2, 0, 1), InvalidArgumentError);  // two units
  EXPECT_THROW(ZeroLayout(numels, {{0, 2}}, 2, 0, 1), InvalidArgumentError);          // in none
  EXPECT_THROW(ZeroLayout(numels, {{0, 1, 2}, {}}, 2, 0, 1), InvalidArgumentError);   // empty
  EXPECT_THROW(ZeroLayout(numels, {{0, 1, 2, 3}}, 2, 0, 1), InvalidArgumentError);    // no such
  EXPECT_THROW(ZeroLayout(numels, {{0, 1, 2}}, 2, 2, 1), InvalidArgumentError);
  EXPECT_THROW(ZeroLayout(numels, {{0, 1, 2}}, 2, -1, 1), InvalidArgumentError);
  EXPECT_THROW(ZeroLayout(numels, {{0, 1, 2}}, 0, 0, 1), InvalidArgumentError);
  EXPECT_THROW(ZeroLayout(numels, {}, 2, 0, 1), InvalidArgumentError);
  EXPECT_NO_THROW(ZeroLayout(numels, {{2, 0}, {1}}, 2, 1, 1));
}

TEST(ZeroLayoutTest, PlanUnitsGroupsInReverseOrderClosingAtTheLimit) {
  // float32, 100 bytes each: the first unit closes at 100 bytes, the others at 200.
  UnitLimits limits{200, 100};
  EXPECT_EQ(planUnits({25, 25, 25, 25}, DataType::kFloat32, limits), (Units{{3}, {2, 1}, {0}}));
  // bfloat16 halves the bytes: 50 elements are 100 bytes.
  EXPECT_EQ(planUnits({50, 50, 50, 50}, DataType::kBFloat16, limits), (Units{{3}, {2, 1}, {0}}));
  EXPECT_EQ(planUnits({25, 25, 25, 25}, DataType::kBFloat16, limits), (Units{{3, 2}, {1, 0}}));
  // 10 floats (40 B) stay open below the first limit, so 200 floats (800 B) join them; then 30
  // (120 B) and 50 (200 B) are below 400 B and 100 (400 B) closes the unit.
  EXPECT_EQ(planUnits({100, 50, 30, 200, 10}, DataType::kFloat32, UnitLimits{400, 100}),
            (Units{{4, 3}, {2, 1, 0}}));
  // A parameter larger than the limit closes the unit it joins; it is never split.
  EXPECT_EQ(planUnits({1000, 1}, DataType::kFloat32, limits), (Units{{1, 0}}));
  EXPECT_EQ(planUnits({7}, DataType::kFloat32, limits), (Units{{0}}));
}

}  // namespace
}  // namespace chorus::parallel
