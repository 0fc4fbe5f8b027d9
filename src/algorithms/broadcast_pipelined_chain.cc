// Pipelined chain broadcast: bandwidth-optimal, for large messages.
//
// What it does: ranks form a chain from the root, root -> root+1 -> ... -> root+p-1 (mod p). The
// message is cut into segments of about Peers::segmentBytes() (256 KiB). The root sends them
// all; every other rank receives each segment in place and forwards it downstream as soon as it
// lands, while the receives of its next kStreamWindow - 1 segments are already posted. So segment
// j crosses link i at about time i + j: all links are busy at once.
//
// It starts with the ring check (Note [Ring check] in stream.h), so mismatched calls are caught.
//
// Cost: p - 1 + segments - 1 segment-times; each rank receives and sends the message once. For
// a message of many segments that is nearly one message-time whatever p is; for a message of one
// segment it is p-1 message-times, worse than the binomial tree's log2 p.
//
// Limits: any p, any size (an empty message is one empty segment), any root.
#include "algorithms/implementations.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

using patterns::Block;

void broadcastPipelinedChain(Peers& peers, const BroadcastArgs& args) {
  if (peers.size() == 1)
    return;
  const patterns::Chain chain{peers.rank(), peers.size(), args.root};
  const int upstream = chain.upstream();
  const int downstream = chain.downstream();
  const Block message{0, args.bytes};
  const size_t perSegment = peers.segmentBytes();

  postRingCheck(peers);
  if (upstream < 0) {
    // The root: the segments go out back to back.
    patterns::forEachSegment(message, perSegment, [&](Block segment) {
      peers.send(downstream, blockAt(args.output, segment, 1), segment.count);
    });
  } else {
    receiveStream(
        peers, upstream, patterns::segmentCount(message.count, perSegment),
        [&](size_t i) {
          const Block segment = patterns::segmentOf(message, perSegment, i);
          return std::pair<void*, size_t>(blockAt(args.output, segment, 1), segment.count);
        },
        [&](size_t i) {
          if (downstream < 0)
            return;
          const Block segment = patterns::segmentOf(message, perSegment, i);
          peers.send(downstream, blockAt(args.output, segment, 1), segment.count);
        });
  }
  peers.waitAll();
}

}  // namespace chorus::algorithms
