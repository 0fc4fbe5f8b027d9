// Small helpers the algorithms share: byte addressing of element ranges, a copy that tolerates
// empty and identical buffers, the ring check (Note [Ring check]), and receiveStream(), the
// pipelining loop that keeps a window of receives posted ahead of the one being processed.
#pragma once

#include <array>
#include <cstddef>
#include <utility>

#include "algorithms/patterns/partition.h"
#include "algorithms/peers.h"
#include "core/check.h"
#include "core/copy_bytes.h"

namespace chorus::algorithms {

// Receives posted ahead of the one being processed. With 256 KiB segments that is 1 MiB in
// flight per stream: enough to keep a link busy while a segment is reduced, little memory.
inline constexpr size_t kStreamWindow = 4;

// The address of element `offset` in a buffer of `elementSize`-byte elements. Null stays null (a
// zero-count buffer may be null).
inline std::byte* elementAt(void* base, size_t offset, size_t elementSize) {
  return base == nullptr ? nullptr : static_cast<std::byte*>(base) + offset * elementSize;
}
inline const std::byte* elementAt(const void* base, size_t offset, size_t elementSize) {
  return base == nullptr ? nullptr : static_cast<const std::byte*>(base) + offset * elementSize;
}
inline std::byte* blockAt(void* base, patterns::Block block, size_t elementSize) {
  return elementAt(base, block.offset, elementSize);
}
inline const std::byte* blockAt(const void* base, patterns::Block block, size_t elementSize) {
  return elementAt(base, block.offset, elementSize);
}

// chorus::copyBytes that does nothing when source and destination are the same buffer.
inline void copyBytes(void* dst, const void* src, size_t bytes) {
  if (dst != src)
    chorus::copyBytes(dst, src, bytes);
}

// Note [Ring check]
// The transport compares fingerprints only on messages that are received (See Note [Collective
// fingerprint] in core/collective.h). For a mismatch to be caught whatever the algorithms and
// roots involved, every collective on a group of p > 1 ranks starts with this: each rank's first
// message to rank r+1 is sent, and its first receive from rank r-1 posted, before anything else
// (messages per peer are matched in order). If the ranks' calls differ at all, some rank r's call
// differs from rank r-1's; r's first receive from r-1 then gets r-1's first message, the
// fingerprints differ, and r fails the transport, which fails every rank: a rank still inside the
// call raises there, one whose part was already done (a leaf of a broadcast) at its next call. A
// rank that never calls at all is a timeout instead. Ring algorithms (ring reduce-scatter,
// allgather and allreduce, pairwise all-to-all, dissemination barrier) already begin this way;
// trees, chains, linear and butterfly algorithms call postRingCheck() first. It costs one empty
// message per rank, posted at once and waited for with the rest, so it adds no step to the
// critical path when ranks arrive together; but over tcp each message is a system call on both
// sides, and a 2-rank allreduce of 8 bytes took 14.6 us with the check against 10 us without.
// So the butterfly skips it on two ranks, where its first exchange is the check: each rank's first
// message goes to rank r+1 (the other) and its first receive is from rank r-1 (the other).
inline void postRingCheck(Peers& peers) {
  const int size = peers.size();
  if (size == 1)
    return;
  peers.send((peers.rank() + 1) % size, nullptr, 0);
  peers.recv((peers.rank() + size - 1) % size, nullptr, 0);
}

// Sends of a stream are posted without waiting for earlier ones: a send may complete only once its
// receive is posted (see the Transport contract), and the peer posts that receive only as it
// processes the messages before it, which may come from this rank's loop. Waiting for an old send
// before posting the next would deadlock a ring whose ranks all start by sending (it did, over MPI,
// for chunks of more than 8 segments). So algorithms wait only for receives inside their loops and
// for sends at the end (Peers::waitAll()). Requests live until waitAll() anyway.

// Receives `n` messages from `peer` in order, keeping up to kStreamWindow receives posted ahead of
// the one being processed. target(i) -> std::pair<void*, size_t> says where message i lands and is
// called in order i = 0, 1, ...; onArrival(i) is called in order once message i is in. The receive
// for message i + kStreamWindow is posted right after onArrival(i) returns, so target(i + window)
// may reuse the buffer of message i (a ring of kStreamWindow slots). Receives for messages
// i + 1 .. i + window - 1 are already posted while message i is processed: transfers and
// reductions overlap.
template <typename Target, typename OnArrival>
void receiveStream(Peers& peers, int peer, size_t n, Target&& target, OnArrival&& onArrival) {
  std::array<transport::Request*, kStreamWindow> inflight{};
  size_t posted = 0;
  auto postNext = [&] {
    const std::pair<void*, size_t> where = target(posted);
    inflight[posted % kStreamWindow] = peers.recv(peer, where.first, where.second);
    ++posted;
  };
  while (posted < n && posted < kStreamWindow) postNext();
  for (size_t i = 0; i < n; ++i) {
    peers.wait(inflight[i % kStreamWindow]);
    onArrival(i);
    if (posted < n)
      postNext();
  }
}

}  // namespace chorus::algorithms
