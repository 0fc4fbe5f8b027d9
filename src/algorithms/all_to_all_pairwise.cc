// Pairwise exchange all-to-all, of even blocks and of a block size per pair (all_to_all_v).
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
#include "core/collective.h"

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

// The same steps with a block size per pair, after the same steps carried every rank's table
// (its sizes to and from each rank) to every rank: each checks every pair, so a pair that
// disagrees is a MismatchError naming it on every rank before any block moves (a rank still in
// the table round may hear of it first through the abort, which quotes it). (A transport's own
// size check fails only the receiver: its peers may have sent everything and returned.)
void allToAllVPairwise(Peers& peers, const AllToAllVArgs& args) {
  const int rank = peers.rank();
  const int size = peers.size();
  const size_t words = 2 * static_cast<size_t>(size);  // sizes to each rank, then from each
  auto* tables = static_cast<uint64_t*>(peers.scratch(words * size * sizeof(uint64_t)));
  auto table = [&](int q) { return tables + q * words; };
  for (int q = 0; q < size; ++q) {
    table(rank)[q] = args.sendBytes[q];
    table(rank)[size + q] = args.recvBytes[q];
  }
  for (int step = 1; step < size; ++step) {
    const int to = patterns::modulo(rank + step, size);
    const int from = patterns::modulo(rank - step, size);
    peers.sendRecv(to, table(rank), words * sizeof(uint64_t), from, table(from),
                   words * sizeof(uint64_t));
  }
  for (int sender = 0; sender < size; ++sender) {
    for (int receiver = 0; receiver < size; ++receiver) {
      const uint64_t sent = table(sender)[receiver];
      const uint64_t expected = table(receiver)[size + sender];
      if (sent != expected) {
        throw makeSplitMismatchError(peers.worldRank(sender), peers.worldRank(receiver),
                                     peers.fingerprint(), sent, expected);
      }
    }
  }
  const auto* in = static_cast<const std::byte*>(args.input);
  auto* out = static_cast<std::byte*>(args.output);
  copyBytes(out + args.recvOffsets[rank], in + args.sendOffsets[rank], args.recvBytes[rank]);
  for (int step = 1; step < size; ++step) {
    const int to = patterns::modulo(rank + step, size);
    const int from = patterns::modulo(rank - step, size);
    peers.sendRecv(to, in + args.sendOffsets[to], args.sendBytes[to], from,
                   out + args.recvOffsets[from], args.recvBytes[from]);
  }
  peers.heardFromAll();
}

}  // namespace chorus::algorithms
