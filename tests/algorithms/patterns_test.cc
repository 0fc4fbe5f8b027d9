// The pattern math alone: partitions cover the vector exactly, ring schedules agree between
// neighbours and end where the composition needs them, trees span every rank, folding is a
// bijection. Checked exhaustively over small sizes.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/patterns/partition.h"
#include "algorithms/patterns/power_of_two.h"
#include "algorithms/patterns/ring.h"

namespace chorus::algorithms::patterns {
namespace {

TEST(Partition, EvenBlocksTileTheVector) {
  for (size_t total : {0, 1, 2, 7, 13, 100, 1037}) {
    for (size_t parts = 1; parts <= 9; ++parts) {
      size_t next = 0;
      for (size_t i = 0; i < parts; ++i) {
        const Block block = evenBlock(total, parts, i);
        EXPECT_EQ(block.offset, next);
        EXPECT_LE(block.count, total / parts + 1);
        EXPECT_GE(block.count, total / parts);
        next = block.end();
      }
      EXPECT_EQ(next, total);
    }
  }
}

TEST(Partition, SegmentsTileABlockAndRespectTheSize) {
  for (size_t count : {0, 1, 5, 64, 65, 1000}) {
    for (size_t perSegment : {1, 3, 64}) {
      const Block block{17, count};
      size_t next = block.offset;
      size_t segments = 0;
      forEachSegment(block, perSegment, [&](Block segment) {
        EXPECT_EQ(segment.offset, next);
        EXPECT_LE(segment.count, perSegment);
        next = segment.end();
        ++segments;
      });
      EXPECT_EQ(next, block.end());
      EXPECT_GE(segments, 1u);  // an empty block still has one (empty) segment
    }
  }
  EXPECT_EQ(segmentElements(256 * 1024, 4), 65536u);
  EXPECT_EQ(segmentElements(2, 8), 1u);
}

TEST(Ring, NeighboursAgreeOnEveryStep) {
  for (int size = 2; size <= 9; ++size) {
    for (int rank = 0; rank < size; ++rank) {
      const Ring me{rank, size};
      const Ring before{me.prev(), size};
      for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllgather}) {
        for (int step = 0; step < me.steps(); ++step) {
          EXPECT_EQ(me.recvChunk(phase, step), before.sendChunk(phase, step));
          if (step + 1 < me.steps()) {
            // What arrives at step s is what leaves at step s+1.
            EXPECT_EQ(me.recvChunk(phase, step), me.sendChunk(phase, step + 1));
          }
        }
      }
      // Reduce-scatter ends with chunk `rank`, which is what the allgather starts from.
      EXPECT_EQ(me.recvChunk(RingPhase::kReduceScatter, me.steps() - 1), rank);
      EXPECT_EQ(me.sendChunk(RingPhase::kAllgather, 0), rank);
    }
  }
}

TEST(Ring, CursorWalksEverySegmentOfEveryStep) {
  const RingLayout layout{103, 5};
  const Ring ring{2, 5};
  RingSegmentCursor cursor(ring, layout, RingPhase::kAllgather, 4);
  size_t walked = 0;
  std::set<size_t> covered;
  while (!cursor.done()) {
    const Block chunk = layout.chunk(ring.recvChunk(RingPhase::kAllgather, cursor.step()));
    const Block segment = cursor.segment();
    EXPECT_GE(segment.offset, chunk.offset);
    EXPECT_LE(segment.end(), chunk.end());
    for (size_t i = segment.offset; i < segment.end(); ++i) covered.insert(i);
    cursor.advance();
    ++walked;
  }
  EXPECT_EQ(walked, RingSegmentCursor(ring, layout, RingPhase::kAllgather, 4).total());
  // Every element except this rank's own chunk arrives exactly once.
  EXPECT_EQ(covered.size(), layout.count - layout.chunk(2).count);
}

TEST(BinomialTree, SpansEveryRankFromAnyRoot) {
  for (int size = 1; size <= 17; ++size) {
    for (int root = 0; root < size; ++root) {
      std::vector<int> parentOf(size, -2);
      std::set<std::pair<int, int>> edges;
      for (int rank = 0; rank < size; ++rank) {
        const BinomialTree tree(rank, size, root);
        parentOf[rank] = tree.parent();
        EXPECT_EQ(tree.isRoot(), rank == root);
        tree.forEachChildLargestFirst([&](int child) { edges.insert({rank, child}); });
        int children = 0;
        tree.forEachChildSmallestFirst([&](int child) {
          EXPECT_TRUE(edges.count({rank, child}));
          ++children;
        });
        EXPECT_EQ(tree.hasChildren(), children > 0);
      }
      EXPECT_EQ(edges.size(), static_cast<size_t>(size - 1));
      for (int rank = 0; rank < size; ++rank) {
        if (rank == root)
          continue;
        EXPECT_TRUE(edges.count({parentOf[rank], rank})) << "p" << size << " root " << root;
        // Walking up reaches the root within log2(p) + 1 hops.
        int hops = 0;
        for (int at = rank; at != root && hops <= 6; at = parentOf[at]) ++hops;
        EXPECT_LE(hops, 5);
      }
    }
  }
}

TEST(PowerOfTwoFold, CoreIsABijection) {
  for (int size = 1; size <= 33; ++size) {
    std::set<int> coreRanks;
    int folded = 0;
    int core = 0;
    for (int rank = 0; rank < size; ++rank) {
      const PowerOfTwoFold fold(rank, size);
      core = fold.coreSize();
      if (fold.folded()) {
        ++folded;
        EXPECT_TRUE(PowerOfTwoFold(fold.foldPartner(), size).absorbs());
        continue;
      }
      EXPECT_EQ(fold.rankOfCore(fold.coreRank()), rank);
      coreRanks.insert(fold.coreRank());
    }
    EXPECT_EQ(core & (core - 1), 0);
    EXPECT_LE(core, size);
    EXPECT_GT(2 * core, size);
    EXPECT_EQ(static_cast<int>(coreRanks.size()), core);
    EXPECT_EQ(folded, size - core);
  }
}

}  // namespace
}  // namespace chorus::algorithms::patterns
