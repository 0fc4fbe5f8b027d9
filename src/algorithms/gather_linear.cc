// Linear gather: every rank sends its block straight to the root.
//
// What it does: the root posts all p-1 receives at once, each into its block of the output, and
// copies its own block locally; every other rank sends its input to the root. It starts with the
// ring check (Note [Ring check] in stream.h), so a rank that named a different root is caught.
//
// Cost: one step; the root receives (p-1) blocks, which its link serializes: time grows linearly
// with p, which is optimal in bytes for the root (it must receive them all anyway).
//
// Limits: any p, any block size, any root.
#include "algorithms/implementations.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

void gatherLinear(Peers& peers, const GatherArgs& args) {
  const size_t bytes = args.bytesPerRank;
  postRingCheck(peers);
  if (peers.rank() != args.root) {
    peers.send(args.root, args.input, bytes);
    peers.waitAll();
    return;
  }
  for (int peer = 0; peer < peers.size(); ++peer) {
    if (peer == args.root)
      continue;
    peers.recv(peer, elementAt(args.output, static_cast<size_t>(peer), bytes), bytes);
  }
  copyBytes(elementAt(args.output, static_cast<size_t>(args.root), bytes), args.input, bytes);
  peers.waitAll();
  peers.heardFromAll();
}

}  // namespace chorus::algorithms
