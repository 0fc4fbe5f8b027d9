// Binomial tree broadcast: latency-optimal, for small messages.
//
// What it does: ranks are numbered relative to the root (patterns/binomial_tree.h). Each rank
// waits for the data from its parent, then sends it to its children, the child with the largest
// subtree first:
//
//   round 0: the root sends to relative rank 2^(k-1) (k = ceil(log2 p));
//   round j: every rank that has the data sends to the one 2^(k-1-j) above it (if it exists).
//
// It starts with the ring check (Note [Ring check] in stream.h), so a rank that called a different
// collective, or named a different root, is caught by the fingerprint check instead of leaving
// its parent or child waiting.
//
// Cost: ceil(log2 p) rounds of the whole message; the root sends ceil(log2 p) copies, a leaf
// receives one. Large messages prefer the pipelined chain, whose time is nearly independent of p.
//
// Limits: any p, any size, any root.
#include "algorithms/implementations.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

void broadcastBinomialTree(Peers& peers, const BroadcastArgs& args) {
  if (peers.size() == 1)
    return;
  const patterns::BinomialTree tree(peers.rank(), peers.size(), args.root);

  postRingCheck(peers);
  if (!tree.isRoot())
    peers.wait(peers.recv(tree.parent(), args.output, args.bytes));
  tree.forEachChildLargestFirst([&](int child) { peers.send(child, args.output, args.bytes); });
  peers.waitAll();
}

}  // namespace chorus::algorithms
