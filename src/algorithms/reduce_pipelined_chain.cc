// Pipelined chain reduce: bandwidth-optimal, for large vectors.
//
// What it does: ranks form a chain ending at the root, root+p-1 -> ... -> root+1 -> root (mod
// p). The vector is cut into segments of about Peers::segmentBytes() (256 KiB). The rank at the
// far end sends its input, segment by segment; every other rank receives each segment, adds its
// own input to it and forwards it toward the root as soon as it is reduced, while the receives of
// its next kStreamWindow - 1 segments are already posted. The root writes input + incoming into
// its output. So all links and all ranks' reductions work at once.
//
// The input is never modified (partial sums are built in scratch), and non-root ranks never touch
// the output. It starts with the ring check (Note [Ring check] in stream.h), so mismatched calls
// are caught.
//
// Cost: p - 1 + segments - 1 segment-times; each rank receives, reduces and sends the vector
// once. For a vector of one segment the p-1 serial hops lose to the binomial tree's log2 p.
//
// Limits: any p, any count, any root. Scratch: one vector on every rank but the far end.
#include <span>

#include "algorithms/implementations.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/stream.h"
#include "core/reduce_kernels.h"

namespace chorus::algorithms {

using patterns::Block;

void reducePipelinedChain(Peers& peers, const ReduceArgs& args) {
  const size_t elementSize = dataTypeSize(args.dtype);
  if (peers.size() == 1) {
    copyBytes(args.output, args.input, args.count * elementSize);
    return;
  }
  // Data flows toward the root: it arrives from `downstream` and leaves to `upstream`.
  const patterns::Chain chain{peers.rank(), peers.size(), args.root};
  const int upstream = chain.upstream();
  const int downstream = chain.downstream();
  const Block vector{0, args.count};
  const size_t perSegment = patterns::segmentElements(peers.segmentBytes(), elementSize);

  postRingCheck(peers);

  if (downstream < 0) {
    // The far end: its input is the first partial sum.
    patterns::forEachSegment(vector, perSegment, [&](Block segment) {
      peers.send(upstream, blockAt(args.input, segment, elementSize), segment.count * elementSize);
    });
    peers.waitAll();
    return;
  }

  void* incoming = peers.scratch(args.count * elementSize);
  receiveStream(
      peers, downstream, patterns::segmentCount(vector.count, perSegment),
      [&](size_t i) {
        const Block segment = patterns::segmentOf(vector, perSegment, i);
        return std::pair<void*, size_t>(blockAt(incoming, segment, elementSize),
                                        segment.count * elementSize);
      },
      [&](size_t i) {
        const Block segment = patterns::segmentOf(vector, perSegment, i);
        std::byte* partial = blockAt(incoming, segment, elementSize);
        const std::byte* mine = blockAt(args.input, segment, elementSize);
        if (upstream < 0 && i == 0)
          peers.heardFromAll();  // the root: the first segment carries every rank's part
        std::byte* dst = upstream < 0 ? blockAt(args.output, segment, elementSize) : partial;
        if (segment.count > 0) {
          const void* sources[2] = {upstream < 0 ? mine : partial, upstream < 0 ? partial : mine};
          kernels::reduceMany(args.op, args.dtype, dst, sources, segment.count);
        }
        if (upstream >= 0)
          peers.send(upstream, partial, segment.count * elementSize);
      });
  peers.waitAll();
}

}  // namespace chorus::algorithms
