// Pairwise exchange all-to-all.
//
// What it does: rank r copies its own block (input block r to output block r) locally, then in
// step k = 1 .. p-1 sends input block (r+k) mod p to rank (r+k) mod p and receives output block
// (r-k) mod p from rank (r-k) mod p. In every step each rank sends to exactly one rank and
// receives from exactly one, so no link or receiver is oversubscribed.
//
// Cost: p-1 steps; each rank sends and receives (p-1) blocks. Steps are synchronous (each waits
// for its exchange), so for tiny blocks latency is (p-1) messages.
//
// Limits: any p, any block size. Input and output must not overlap.
#include "algorithms/implementations.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

void allToAllPairwise(Peers& peers, const AllToAllArgs& args) {
  const int rank = peers.rank();
  const int size = peers.size();
  const size_t bytes = args.bytesPerRank;
  auto block = [&](auto* base, int index) {
    return elementAt(base, static_cast<size_t>(index), bytes);
  };
  copyBytes(block(args.output, rank), block(args.input, rank), bytes);
  for (int step = 1; step < size; ++step) {
    const int to = patterns::modulo(rank + step, size);
    const int from = patterns::modulo(rank - step, size);
    peers.sendRecv(to, block(args.input, to), bytes, from, block(args.output, from), bytes);
  }
  peers.heardFromAll();
}

}  // namespace chorus::algorithms
