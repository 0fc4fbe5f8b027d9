// The two phases of a ring, shared by ring reduce-scatter, ring allgather and ring allreduce
// (which is one followed by the other over the same uneven chunk partition, in place). Schedules
// and chunk math are in patterns/ring.h; these functions move the bytes.
#pragma once

#include <cstddef>

#include "algorithms/patterns/ring.h"
#include "algorithms/peers.h"
#include "chorus/types.h"

namespace chorus::algorithms {

struct RingReduceScatterBuffers {
  // This rank's contribution: layout.count elements; chunk c at layout.chunk(c).offset.
  const void* input;
  // Same layout: where this rank writes the partial reductions it forwards. May equal `input`
  // (allreduce, in place).
  void* partial;
  // layout.chunk(rank).count elements: receives the full reduction of chunk `rank`. May point into
  // `input` at that chunk (allreduce).
  void* result;
  // kStreamWindow slots of ringSlotBytes() each that incoming segments land in before they are
  // combined with `input`; null to receive straight into `partial` / `result` instead (possible
  // when they do not alias `input`).
  void* slots;
};

// Bytes of one receive slot for ringReduceScatterPhase (a multiple of 64).
size_t ringSlotBytes(const patterns::RingLayout& layout, size_t elementSize, size_t segmentBytes);

// p-1 steps; at step s this rank sends chunk r-s-1 and receives chunk r-s-2, each cut into
// segments that are received, reduced and forwarded one at a time. On return `result` holds the
// reduction over all ranks of chunk `rank`, and every send has completed. Calls
// peers.heardFromAll() when the last step's first segment arrives (Note [Heard from every rank]).
void ringReduceScatterPhase(Peers& peers,
                            const patterns::RingLayout& layout,
                            DataType dtype,
                            ReduceOp op,
                            const RingReduceScatterBuffers& buffers);

// p-1 steps; `data` (layout.count elements of elementSize bytes) holds chunk `rank` on entry and
// every chunk on return. At step s this rank sends chunk r-s and receives chunk r-s-1 in place,
// forwarding each segment as soon as it arrives. With `noteHeardFromAll`, calls
// peers.heardFromAll() when the last step's first segment arrives (not in an allreduce, whose
// reduce-scatter phase did).
void ringAllgatherPhase(Peers& peers,
                        const patterns::RingLayout& layout,
                        size_t elementSize,
                        void* data,
                        bool noteHeardFromAll);

}  // namespace chorus::algorithms
