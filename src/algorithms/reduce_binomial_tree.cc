// Binomial tree reduce: latency-optimal, for small vectors.
//
// What it does: ranks are numbered relative to the root (patterns/binomial_tree.h). Each rank
// receives the partial reductions of its children, smallest subtree first (the order in which
// they are ready), combines them with its own input, and sends the result to its parent:
//
//   round 0: odd relative ranks send to the rank below them;
//   round j: relative ranks that are odd multiples of 2^j send to the rank 2^j below;
//   after ceil(log2 p) rounds the root holds the reduction of all inputs.
//
// The input is never modified: a leaf sends its input as is; an inner rank accumulates in
// scratch, the root in its output. It starts with the ring check (Note [Ring check] in stream.h),
// so mismatched calls are caught.
//
// Cost: ceil(log2 p) rounds of the whole vector; the root receives and reduces ceil(log2 p)
// vectors. Large vectors prefer the pipelined chain, which pipelines and spreads the reductions.
//
// Limits: any p, any count, any root. Scratch: two vectors on inner non-root ranks, one on the
// root, none on leaves. Children are received one at a time into one buffer.
#include <span>

#include "algorithms/implementations.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/stream.h"
#include "core/reduce_kernels.h"

namespace chorus::algorithms {

void reduceBinomialTree(Peers& peers, const ReduceArgs& args) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  if (peers.size() == 1) {
    copyBytes(args.output, args.input, bytes);
    return;
  }
  const patterns::BinomialTree tree(peers.rank(), peers.size(), args.root);

  postRingCheck(peers);

  if (!tree.hasChildren()) {
    peers.send(tree.parent(), args.input, bytes);
    peers.waitAll();
    return;
  }

  const size_t region = patterns::alignUp(bytes);
  auto* scratch = static_cast<std::byte*>(peers.scratch(tree.isRoot() ? region : 2 * region));
  std::byte* incoming = scratch;
  void* accumulator = tree.isRoot() ? args.output : scratch + region;
  bool first = true;
  tree.forEachChildSmallestFirst([&](int child) {
    peers.wait(peers.recv(child, incoming, bytes));
    if (args.count > 0) {
      if (first) {
        // accumulator = input op child, without copying the input first.
        const void* sources[2] = {args.input, incoming};
        kernels::reduceMany(args.op, args.dtype, accumulator, sources, args.count);
      } else {
        kernels::reduceInto(args.op, args.dtype, accumulator, incoming, args.count);
      }
    }
    first = false;
  });
  if (!tree.isRoot())
    peers.send(tree.parent(), accumulator, bytes);
  peers.waitAll();
  if (tree.isRoot())
    peers.heardFromAll();
}

}  // namespace chorus::algorithms
