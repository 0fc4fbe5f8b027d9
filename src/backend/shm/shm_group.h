// ShmGroup: the shared memory behind the shm backend's native collectives, for the ranks of one
// communicator on one node.
//
// Each rank owns one segment: a control block (its two most recent arrival records, its step
// counters, its state, and room for an error), two small slots and two chunk slots (the record or
// slot of a step is chosen by its parity: double buffering). An arrival record is a few cache
// lines: the collective's number, its fingerprint and up to kInlineBytes of data; a peer waiting
// for the number reads the lines that hold the data in the same pass, so a small collective costs
// one round of cache-line transfers (Note [Arrival record]). Every rank maps every
// segment, so a rank reads its peers' data straight out of their memory. Segments are created and
// exchanged through the communicator's store, and unlinked as soon as every rank has mapped every
// segment, so no name is left in /dev/shm after setup, even if a rank is later killed (chorusrun
// also removes /dev/shm/chorus-<CHORUS_JOB_ID>-* after the job, for the short setup window).
// Segments are SharedMappings (core/shared_memory.h): allocated up front and pre-faulted, no faults
// on the hot path.
//
// Direct reads: where the kernel allows it (probed at setup on every pair; the result is agreed by
// all ranks), a rank may also copy straight out of a peer's private memory with process_vm_readv
// (cross-memory attach): one copy instead of two through the slots, for large data movement.
//
// Synchronization: counters only grow (one per step kind, on their own cache lines). A rank
// publishes a step by storing its counter; peers wait until every rank's counter reaches a value.
// Waiting spins briefly (not at all with more ranks than cores), yields, then sleeps on a futex
// (the group's "bell" in rank 0's segment) that a publisher rings only when someone sleeps, so an
// idle rank does not burn a core; sleeps are sliced, so the deadline, an abort, a goodbye or a dead
// peer (watched through a pidfd, so a zombie counts as dead) are noticed within about 50 ms.
//
// Failure is final: fail() records the error in this rank's block and marks the group failed, and
// every rank's next wait raises an error of the same type quoting it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/cross_memory.h"
#include "core/deadline.h"
#include "core/function_ref.h"
#include "core/process_watch.h"
#include "core/rank_names.h"
#include "core/shared_memory.h"
#include "store/store.h"
#include "transport/transport.h"

namespace chorus::backend::shm {

struct ControlBlock;  // a rank's counters, fingerprints and state (shm_group.cc)

// Step kinds, each with its own counter in every rank's control block.
enum class Step : int { kArrived = 0, kCopied, kReduced, kDone, kCount };

class ShmGroup {
 public:
  // Bytes of data that travel with the arrival: at most kSmallSlotBytes, of which up to
  // kInlineBytes inside the arrival record itself. Bytes of each chunk slot.
  static constexpr size_t kSmallSlotBytes = 32 * 1024;
  static constexpr size_t kInlineBytes = 24 + 4 * 64;
  static constexpr size_t kChunkSlotBytes = 512 * 1024;

  // Creates this rank's segment, maps every peer's through `store` (already scoped to the
  // communicator), then unlinks the names. Collective; TimeoutError at `deadline` naming the ranks
  // that did not arrive.
  // Its errors name the ranks by `names` (Note [One rank numbering]).
  ShmGroup(int rank,
           int size,
           detail::RankNames names,
           const std::shared_ptr<store::Store>& store,
           const std::string& scope,
           Deadline deadline);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  const detail::RankNames& names() const { return names_; }
  int size() const { return size_; }

  // Slot `parity` (0 or 1) of `rank`'s chunk area.
  std::byte* chunkSlot(int rank, uint64_t parity) const;

  // This rank arrives at collective number `sequence` (1, 2, ...): publishes its `fingerprint` and
  // `bytes` (at most kSmallSlotBytes) of `data`, which makes its kArrived step `sequence`, and
  // wakes sleeping waiters.
  void arrive(uint64_t sequence, const Fingerprint& fingerprint, const void* data, size_t bytes);
  // Where this rank's data of more than kInlineBytes for collective `sequence` goes: a caller may
  // build it there and pass this as arrive's `data` (then nothing is copied).
  std::byte* outgoingSlot(uint64_t sequence) const { return smallSlot(rank_, sequence); }
  // What `rank` published on arriving at `sequence`, valid once waitAll(kArrived, sequence) has
  // returned and until this rank arrives at sequence + 1: its fingerprint, and its data of
  // `bytes` (the size it was published with).
  const Fingerprint& arrivalFingerprint(int rank, uint64_t sequence) const;
  const std::byte* arrivalData(int rank, uint64_t sequence, size_t bytes) const;

  // Stores this rank's counter of `step` (not kArrived: arrive() publishes that) and wakes
  // sleeping waiters.
  void publish(Step step, uint64_t value);
  // Waits until every rank has arrived at `sequence`, as waitAll(kArrived, sequence, deadline);
  // while it waits it also prefetches the peers' record lines that carry `bytes` of inline data
  // (Note [Arrival record]). Returns whether it had to wait: false when every peer was there at
  // its first look.
  bool waitArrivals(uint64_t sequence, size_t bytes, Deadline deadline);
  // Waits until every rank's counter of `step` is at least `value`. Throws the group's failure,
  // PeerError for a peer that died or said goodbye before reaching `value` (one that got there
  // may leave: Note [Only needed peers fail a wait]), TimeoutError (naming the ranks behind) at
  // `deadline` (the group fails then too).
  void waitAll(Step step, uint64_t value, Deadline deadline);

  // Until called again with an empty one, every wait also calls `poll` (which must outlive that)
  // in each pass, and, while it returns true, at least every millisecond while it sleeps: the
  // front end's send/recv transfers while the shm backend's collectives wait (Note [Collectives
  // and transfers together], runtime/communicator_transfers.cc). Its exceptions end the wait.
  void pollWhileWaiting(detail::FunctionRef<bool()> poll) {
    poll_ = poll;
    pollSoon_ = false;
  }
  // Makes this rank's sleeping wait call its poll soon (the group's bell: the peers' sleepers
  // wake and sleep again). Any thread.
  void wakeSleepers() noexcept;

  // Whether ranks read each other's private memory directly (process_vm_readv, "cross-memory
  // attach"): the same on every rank; false where the kernel refuses it or CHORUS_SHM_DIRECT=0.
  bool directReads() const { return directReads_; }
  // Copies `bytes` at address `from` in `rank`'s memory to `to` (needs directReads()). Throws
  // PeerError if `rank` died, InternalError naming the cause otherwise. Where the kernel's copy
  // would stall (Note [rep movsb and 4 KiB aliasing]), it reads through a private staging buffer
  // at `from`'s offset in its page, then copies that to `to`.
  void readFrom(int rank, void* to, uintptr_t from, size_t bytes);

  // Throws the group's failure, if it failed.
  void throwIfFailed() const;

  // Fails the group with `error` (first failure wins); every rank's waits then throw. Never throws.
  void fail(std::exception_ptr error) noexcept;
  // Says goodbye: peers that wait on this rank get PeerError. Never throws. Idempotent.
  void close() noexcept;

 private:
  ControlBlock& block(int rank) const;
  // Slot `parity` (0 or 1) of `rank`'s small area.
  std::byte* smallSlot(int rank, uint64_t parity) const;
  // Stores `value` in this rank's `counter` and rings the bell if anyone sleeps on it.
  void announce(std::atomic<uint64_t>& counter, uint64_t value);
  // `rank`'s counter of step `index` for a wait until it reaches `value`.
  std::atomic<uint64_t>& counter(int rank, int index, uint64_t value) const;
  // Whether `rank`'s counter of step `index` is still below `value`.
  bool isBehind(int rank, int index, uint64_t value) const;
  // waitAll, prefetching `touchLines` lines of every peer's arrival record of parity `value & 1`
  // in each spinning pass (0 for a step other than kArrived). Returns whether it had to wait.
  bool waitUntil(int index, uint64_t value, Deadline deadline, size_t touchLines);
  // Whether some rank's counter of step `index` is below `value`; with `late`, collects them all.
  bool anyBehind(int index, uint64_t value, std::vector<int>* late) const;
  // Throws the group's failure if a rank is still behind on counter `index` (Note [Only needed
  // peers fail a wait]).
  void throwIfFailedWhileBehind(int index, uint64_t value) const;
  // Throws the group's failure, or PeerError if a rank that the wait for counter `index` to reach
  // `value` still needs has died or closed. A rank that already got there may close, die or fail
  // the group without failing this wait.
  void checkNeededPeers(int index, uint64_t value) const;
  // Throws PeerError if `rank` died or closed.
  void checkPeer(int rank) const;
  [[noreturn]] void throwGroupFailure() const;
  // Sleeps on the bell until it rings, or for a slice (shorter while polling), or `deadline`.
  void sleepOnBell(uint32_t seen, Deadline deadline);
  bool canReadEveryPeer() const;

  int rank_;
  int size_;
  detail::RankNames names_;  // Note [One rank numbering]
  int spinPasses_;           // passes a wait spins before it yields (0 with more ranks than cores)
  std::vector<detail::SharedMapping> segments_;  // by rank
  std::vector<ProcessWatch> peerProcesses_;      // by rank (empty for this one)
  bool closed_ = false;
  bool directReads_ = false;
  detail::CrossMemoryReader reader_;  // readFrom's
  detail::FunctionRef<bool()> poll_;  // pollWhileWaiting's
  bool pollSoon_ = false;             // poll_'s last answer: sleep at most kPollSlice
};

}  // namespace chorus::backend::shm
