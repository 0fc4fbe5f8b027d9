// Ring allgather, and the allgather phase that ring allreduce reuses.
//
// What it does: rank r starts with block r of the output. Blocks travel around the ring
// 0 -> 1 -> ... -> p-1 -> 0, each rank keeping a copy as it passes:
//
//   step 0:    rank r sends its own block r to r+1, and receives block r-1 from r-1 in place;
//   step s:    rank r forwards block r-s (received at step s-1) and receives block r-s-1;
//   after p-1 steps every rank has every block.
//
// Blocks are cut into segments of about Peers::segmentBytes() (256 KiB): a segment is forwarded
// as soon as it lands, with the receives of the next kStreamWindow - 1 segments already posted,
// so the steps pipeline. Received bytes land directly in the output (no scratch, no extra copy).
//
// Cost per rank: p-1 steps (plus segments - 1 pipeline fill); sends and receives (p-1) blocks.
// Bandwidth-optimal; latency linear in p.
//
// Limits: any p >= 1 and any block size (an empty block still sends one empty message per step).
// The phase works on uneven element chunks too (allreduce); the collective's blocks are even.
#include "algorithms/implementations.h"
#include "algorithms/ring_phases.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

using patterns::Block;
using patterns::Ring;
using patterns::RingLayout;
using patterns::RingPhase;
using patterns::RingSegmentCursor;

void ringAllgatherPhase(
    Peers& peers, const RingLayout& layout, size_t elementSize, void* data, bool noteHeardFromAll) {
  const Ring ring{peers.rank(), peers.size()};
  const size_t perSegment = patterns::segmentElements(peers.segmentBytes(), elementSize);

  // Step 0: this rank's own chunk.
  patterns::forEachSegment(
      layout.chunk(ring.sendChunk(RingPhase::kAllgather, 0)), perSegment, [&](Block segment) {
        peers.send(ring.next(), blockAt(data, segment, elementSize), segment.count * elementSize);
      });

  // Steps 0 .. p-2: receive each segment in place, and forward it unless this is the last step
  // (the next rank is the one that owned that chunk).
  RingSegmentCursor posting(ring, layout, RingPhase::kAllgather, perSegment);
  RingSegmentCursor arriving = posting;
  bool heard = !noteHeardFromAll;  // Note [Heard from every rank]: the last step's first segment
  receiveStream(
      peers, ring.prev(), posting.total(),
      [&](size_t) {
        const Block segment = posting.segment();
        posting.advance();
        return std::pair<void*, size_t>(blockAt(data, segment, elementSize),
                                        segment.count * elementSize);
      },
      [&](size_t) {
        const Block segment = arriving.segment();
        if (arriving.lastStep() && !heard) {
          heard = true;  // the chunk of the next rank, which came through every other rank
          peers.heardFromAll();
        }
        if (!arriving.lastStep()) {
          peers.send(ring.next(), blockAt(data, segment, elementSize), segment.count * elementSize);
        }
        arriving.advance();
      });
  peers.waitAll();
}

void allgatherRing(Peers& peers, const AllgatherArgs& args) {
  const int size = peers.size();
  const size_t bytes = args.bytesPerRank;
  void* mine = elementAt(args.output, static_cast<size_t>(peers.rank()), bytes);
  if (mine != args.input)  // else in place
    copyBytes(mine, args.input, bytes);
  if (size == 1)
    return;
  // Untyped: the layout counts bytes, so the p blocks are the p chunks.
  const RingLayout layout{bytes * static_cast<size_t>(size), size};
  ringAllgatherPhase(peers, layout, 1, args.output, /*noteHeardFromAll=*/true);
}

}  // namespace chorus::algorithms
