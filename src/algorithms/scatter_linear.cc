// Linear scatter: the root sends every rank its block directly.
//
// What it does: the root posts all p-1 sends at once, block i to rank i, and copies its own block
// locally; every other rank receives its block into its output. It starts with the ring check
// (Note [Ring check] in stream.h), so a rank that named a different root is caught.
//
// Cost: one step; the root sends (p-1) blocks, which its link serializes.
//
// Limits: any p, any block size, any root.
#include "algorithms/implementations.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

void scatterLinear(Peers& peers, const ScatterArgs& args) {
  const size_t bytes = args.bytesPerRank;
  postRingCheck(peers);
  if (peers.rank() != args.root) {
    peers.recv(args.root, args.output, bytes);
    peers.waitAll();
    return;
  }
  for (int peer = 0; peer < peers.size(); ++peer) {
    if (peer == args.root)
      continue;
    peers.send(peer, elementAt(args.input, static_cast<size_t>(peer), bytes), bytes);
  }
  copyBytes(args.output, elementAt(args.input, static_cast<size_t>(args.root), bytes), bytes);
  peers.waitAll();
}

}  // namespace chorus::algorithms
