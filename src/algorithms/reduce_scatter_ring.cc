// Ring reduce-scatter, and the reduce-scatter phase that ring allreduce reuses.
//
// What it does: the vector of count = p * countPerRank elements is cut into p chunks (uneven in
// general: patterns/partition.h; even for ReduceScatterArgs). The chunks travel around the ring
// 0 -> 1 -> ... -> p-1 -> 0; every rank adds its own contribution to each chunk as it passes, so
// after p-1 steps each chunk has visited every rank once. The schedule is chosen so that rank r
// finishes with chunk r:
//
//   step 0:    rank r sends its own chunk r-1 to r+1, and receives chunk r-2 from r-1;
//   step s:    rank r sends chunk r-s-1 (which it completed at step s-1) and receives r-s-2;
//   step p-2:  rank r receives chunk r: combined with its own contribution, it is the result.
//
// Each chunk is cut into segments of about Peers::segmentBytes() (256 KiB) and the steps are
// pipelined segment by segment: segment j of step s is forwarded as soon as it is reduced, while
// the receives of the next kStreamWindow - 1 segments are already posted.
//
// Cost per rank: p-1 steps (plus segments - 1 pipeline fill), sends and receives
// (p-1)/p * count elements, reduces (p-1)/p * count elements. Bandwidth-optimal; latency grows
// linearly with p, so small vectors prefer recursive doubling (allreduce) or a tree.
//
// Limits: any p >= 1 and any count (an empty chunk still sends one empty message per step).
// Scratch: the standalone collective needs count elements for partial sums (its input is const);
// the in-place phase of allreduce needs only kStreamWindow segments.
#include <span>

#include "algorithms/implementations.h"
#include "algorithms/ring_phases.h"
#include "algorithms/stream.h"
#include "core/reduce_kernels.h"

namespace chorus::algorithms {

using patterns::Block;
using patterns::Ring;
using patterns::RingLayout;
using patterns::RingPhase;
using patterns::RingSegmentCursor;

size_t ringSlotBytes(const RingLayout& layout, size_t elementSize, size_t segmentBytes) {
  const size_t perSegment = patterns::segmentElements(segmentBytes, elementSize);
  return patterns::alignUp(std::min(perSegment, layout.maxChunkCount()) * elementSize);
}

void ringReduceScatterPhase(Peers& peers,
                            const RingLayout& layout,
                            DataType dtype,
                            ReduceOp op,
                            const RingReduceScatterBuffers& buffers) {
  const Ring ring{peers.rank(), peers.size()};
  const size_t elementSize = dataTypeSize(dtype);
  const size_t perSegment = patterns::segmentElements(peers.segmentBytes(), elementSize);
  const size_t slotBytes = ringSlotBytes(layout, elementSize, peers.segmentBytes());
  const Block own = layout.chunk(ring.rank);

  // Where the reduction of a segment goes: `result` for this rank's own chunk (the last step),
  // `partial` for the chunks it forwards.
  auto destination = [&](Block segment, bool lastStep) -> std::byte* {
    if (lastStep)
      return elementAt(buffers.result, segment.offset - own.offset, elementSize);
    return blockAt(buffers.partial, segment, elementSize);
  };
  auto slot = [&](size_t i) {
    return static_cast<std::byte*>(buffers.slots) + (i % kStreamWindow) * slotBytes;
  };

  // Step 0: the chunk this rank starts with goes out straight from its input.
  patterns::forEachSegment(layout.chunk(ring.sendChunk(RingPhase::kReduceScatter, 0)), perSegment,
                           [&](Block segment) {
                             peers.send(ring.next(), blockAt(buffers.input, segment, elementSize),
                                        segment.count * elementSize);
                           });

  // Steps 0 .. p-2, segment by segment: receive a partial sum from the previous rank, add this
  // rank's contribution, and (except at the last step, whose chunk is this rank's result) pass it
  // on at once: that send is segment j of the next step.
  RingSegmentCursor posting(ring, layout, RingPhase::kReduceScatter, perSegment);
  RingSegmentCursor arriving = posting;
  bool heard = false;  // Note [Heard from every rank]: the last step's first segment
  receiveStream(
      peers, ring.prev(), posting.total(),
      [&](size_t i) {
        const Block segment = posting.segment();
        void* where = buffers.slots ? slot(i) : destination(segment, posting.lastStep());
        posting.advance();
        return std::pair<void*, size_t>(where, segment.count * elementSize);
      },
      [&](size_t i) {
        const Block segment = arriving.segment();
        const bool lastStep = arriving.lastStep();
        if (lastStep && !heard) {
          heard = true;  // it carries the contributions of every other rank
          peers.heardFromAll();
        }
        std::byte* dst = destination(segment, lastStep);
        const std::byte* mine = blockAt(buffers.input, segment, elementSize);
        if (segment.count > 0) {
          // dst may alias the first source only: the input (in place) or the landed segment.
          const void* sources[2] = {buffers.slots ? mine : dst, buffers.slots ? slot(i) : mine};
          kernels::reduceMany(op, dtype, dst, sources, segment.count);
        }
        if (!lastStep)
          peers.send(ring.next(), dst, segment.count * elementSize);
        arriving.advance();
      });
  // The sends read `input` and `partial`; the caller may overwrite them once this returns.
  peers.waitAll();
}

void reduceScatterRing(Peers& peers, const ReduceScatterArgs& args) {
  const int size = peers.size();
  const size_t elementSize = dataTypeSize(args.dtype);
  if (size == 1) {
    copyBytes(args.output, args.input, args.countPerRank * elementSize);
    return;
  }
  const RingLayout layout{args.countPerRank * static_cast<size_t>(size), size};
  // The input is const, so forwarded partial sums need their own space: one vector's worth,
  // of which the chunks of ranks r-2 .. r-p+1 are used. Segments land there directly.
  void* partial = peers.scratch(layout.count * elementSize);
  ringReduceScatterPhase(peers, layout, args.dtype, args.op,
                         RingReduceScatterBuffers{args.input, partial, args.output, nullptr});
}

}  // namespace chorus::algorithms
