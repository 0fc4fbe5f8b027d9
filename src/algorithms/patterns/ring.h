// Ring pattern math: neighbours, and which chunk each step of a ring phase sends and receives.
//
// Ranks form the ring 0 -> 1 -> ... -> p-1 -> 0; every rank sends to next() and receives from
// prev(). A vector is cut into p chunks (patterns/partition.h). The schedules below are chosen so
// that the phases compose in place:
//  - reduce-scatter: at step s (0 .. p-2) rank r sends chunk r-s-1 and receives chunk r-s-2, so the
//    last chunk it receives, and completes, is chunk r itself;
//  - allgather: rank r starts holding chunk r; at step s it sends chunk r-s and receives chunk
//    r-s-1, which it forwards at step s+1.
// So ring allreduce = reduce-scatter (rank r ends with the reduced chunk r) + allgather (chunk r is
// what rank r starts with), over the same uneven partition. All indices are taken modulo p.
#pragma once

#include <cstddef>

#include "algorithms/patterns/partition.h"

namespace chorus::algorithms::patterns {

constexpr int modulo(long long value, int size) {
  const long long m = value % size;
  return static_cast<int>(m < 0 ? m + size : m);
}

enum class RingPhase { kReduceScatter, kAllgather };

struct Ring {
  int rank;
  int size;

  int next() const { return modulo(rank + 1, size); }
  int prev() const { return modulo(rank - 1, size); }

  // Chunk sent at `step` of `phase`.
  int sendChunk(RingPhase phase, int step) const {
    return modulo(rank - step - (phase == RingPhase::kReduceScatter ? 1 : 0), size);
  }
  // Chunk received at `step` of `phase`.
  int recvChunk(RingPhase phase, int step) const {
    return modulo(rank - step - (phase == RingPhase::kReduceScatter ? 2 : 1), size);
  }
  // Steps in a phase.
  int steps() const { return size - 1; }
};

// A vector of `count` elements over a ring of `parts` ranks: chunk c is evenBlock(count, parts, c).
struct RingLayout {
  size_t count;
  int parts;

  Block chunk(int c) const { return evenBlock(count, static_cast<size_t>(parts), c); }
  // Largest chunk (the first one).
  size_t maxChunkCount() const { return chunk(0).count; }
};

// Walks, in order, the segments that one phase of a ring receives: step 0's chunk segment by
// segment, then step 1's, ... up to step p-2. Sender and receiver walk the same sequence.
class RingSegmentCursor {
 public:
  RingSegmentCursor(const Ring& ring,
                    const RingLayout& layout,
                    RingPhase phase,
                    size_t elementsPerSegment)
      : ring_(ring), layout_(layout), phase_(phase), perSegment_(elementsPerSegment) {
    enterStep(0);
  }

  bool done() const { return step_ >= ring_.steps(); }
  int step() const { return step_; }
  bool lastStep() const { return step_ == ring_.steps() - 1; }
  Block segment() const { return segmentOf(chunk_, perSegment_, index_); }

  void advance() {
    if (++index_ == segments_)
      enterStep(step_ + 1);
  }

  // Total number of segments the phase receives.
  size_t total() const {
    size_t sum = 0;
    for (int s = 0; s < ring_.steps(); ++s) {
      sum += segmentCount(layout_.chunk(ring_.recvChunk(phase_, s)).count, perSegment_);
    }
    return sum;
  }

 private:
  void enterStep(int step) {
    step_ = step;
    index_ = 0;
    if (done())
      return;
    chunk_ = layout_.chunk(ring_.recvChunk(phase_, step));
    segments_ = segmentCount(chunk_.count, perSegment_);
  }

  Ring ring_;
  RingLayout layout_;
  RingPhase phase_;
  size_t perSegment_;
  int step_ = 0;
  Block chunk_;
  size_t index_ = 0;
  size_t segments_ = 0;
};

}  // namespace chorus::algorithms::patterns
