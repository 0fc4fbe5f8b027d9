// Recursive doubling allreduce: latency-optimal, for small vectors.
//
// What it does, for p a power of two: in round k (k = 0 .. log2 p - 1) rank r exchanges its whole
// vector with rank r XOR 2^k and combines the two. After round k every block of 2^(k+1) ranks
// holds the reduction over that block, so after log2 p rounds every rank holds the total.
// The two partners of a round combine in rank order (lower rank's vector first), so they compute
// bit-identical results even for operations that are not bitwise commutative (min/max with NaN).
//
// Any other p is folded onto the largest power of two p2 <= p (patterns/power_of_two.h):
//   1. each even rank r < 2(p - p2) sends its vector to r+1, which combines it and stands in for
//      both in the butterfly; the even rank then just waits;
//   2. the p2 remaining ranks run the butterfly above;
//   3. each odd rank r < 2(p - p2) sends the result back to r-1.
//
// It starts with the ring check (Note [Ring check] in stream.h), so mismatched calls are caught;
// on two ranks the butterfly's one exchange is that check already.
//
// Cost per rank: log2 p2 rounds (+2 when p is not a power of two), each sending and receiving the
// whole vector: count * log2 p elements in all, versus 2(p-1)/p * count for the ring. Best while
// the per-message latency dominates, i.e. small vectors (the table's default: <= 64 KiB).
//
// Limits: any p, any count. Scratch: one vector.
#include "algorithms/implementations.h"
#include "algorithms/patterns/power_of_two.h"
#include "algorithms/stream.h"
#include "core/reduce_kernels.h"

namespace chorus::algorithms {

namespace {

// Rounds of the butterfly among the core ranks. `incoming` holds one vector.
void butterfly(Peers& peers,
               const AllreduceArgs& args,
               const patterns::PowerOfTwoFold& fold,
               std::byte* incoming) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  const int coreRank = fold.coreRank();
  for (int mask = 1; mask < fold.coreSize(); mask <<= 1) {
    const int partner = fold.rankOfCore(coreRank ^ mask);
    peers.sendRecv(partner, args.output, bytes, partner, incoming, bytes);
    if (args.count == 0)
      continue;
    if (peers.rank() < partner) {
      kernels::reduceInto(args.op, args.dtype, args.output, incoming,
                          args.count);  // mine op theirs
    } else {
      kernels::reduceInto(args.op, args.dtype, incoming, args.output,
                          args.count);  // theirs op mine
      copyBytes(args.output, incoming, bytes);
    }
  }
}

}  // namespace

void allreduceRecursiveDoubling(Peers& peers, const AllreduceArgs& args) {
  if (peers.size() == 1)
    return;
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  const patterns::PowerOfTwoFold fold(peers.rank(), peers.size());
  if (peers.size() > 2)
    postRingCheck(peers);

  if (fold.folded()) {
    // Step 1 and 3 seen from a folded rank: hand over the vector, get the result back. Receiving
    // into the buffer being sent is safe: the partner replies only after it has all of it.
    peers.send(fold.foldPartner(), args.output, bytes);
    peers.recv(fold.foldPartner(), args.output, bytes);
    peers.waitAll();
    peers.heardFromAll();  // the result
    return;
  }

  auto* incoming = static_cast<std::byte*>(peers.scratch(bytes));
  if (fold.absorbs()) {
    // Step 1: take the folded partner's vector in.
    peers.recv(fold.foldPartner(), incoming, bytes);
    peers.waitAll();
    if (args.count > 0)
      kernels::reduceInto(args.op, args.dtype, args.output, incoming, args.count);
  }

  // Step 2.
  butterfly(peers, args, fold, incoming);
  peers.heardFromAll();  // the butterfly's last round brought every core rank's (folded) vector

  if (fold.absorbs()) {
    // Step 3: give the folded partner the result.
    peers.send(fold.foldPartner(), args.output, bytes);
    peers.waitAll();
  }
}

}  // namespace chorus::algorithms
