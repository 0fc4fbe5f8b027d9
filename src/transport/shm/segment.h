// Segment: the POSIX shared-memory block each rank of a shm transport creates, and the layout that
// every rank reads in it. A segment holds this rank's control words (state, doorbell, abort
// notice) and one inbound Ring (shm/ring.h) per other rank, which that rank writes and this rank
// reads.
//
// Contract:
//  - Segment::create makes, sizes, maps and pre-faults a new named segment (O_EXCL, mode 0600);
//    Segment::open maps an existing one by name and checks its magic, rank and group size. Both
//    pre-fault the mapping, so the hot path never takes a page fault.
//  - unlinkName() removes the name from /dev/shm (the memory lives on while any rank maps it).
//    The creator's destructor unlinks too, if it has not yet (a setup that failed leaves nothing).
//  - The doorbell is a 32-bit futex word shared across processes: ringDoorbell() bumps it and wakes
//  the
//    owner if it sleeps; sleepUntilRung() is the owner's side (see Note [Doorbell]).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/shared_memory.h"
#include "transport/shm/ring.h"

namespace chorus::transport::shm {

// A rank's state word, as its peers see it. Open until the rank says goodbye (close()), publishes
// an abort notice (abort() or an error it found), or plays a crash (crashForTesting).
enum class PeerState : uint32_t { kOpen = 0, kGoodbye = 1, kAborted = 2, kCrashed = 3 };

// The fixed part at the start of every segment. Each group of words that one side writes sits on
// its own cache line.
struct SegmentHeader {
  // "chorus-u": the layout with direct messages and 32-byte fingerprints (a segment of an older
  // build is refused).
  static constexpr uint64_t kMagic = 0x63686f7275732d75;
  static constexpr size_t kAbortCapacity = 64 * 1024;

  static constexpr uint64_t kProbeValue = 0x63686f7275732121;  // "chorus!!"

  // Written once by the creator, read-only afterwards.
  alignas(kCacheLine) uint64_t magic;
  int32_t rank;
  int32_t size;
  int32_t pid;
  uint32_t ringBytes;
  // kProbeValue, at `probeAddress` in the creator's memory: what a peer reads with
  // process_vm_readv to learn whether it may read this rank's memory (core/cross_memory.h).
  uint64_t probe;
  uint64_t probeAddress;
  // Whether this rank reads its peers' large messages straight from their memory: kUnknown until
  // it has probed every peer, then kYes or kNo (stored with release; read by its senders).
  static constexpr uint32_t kUnknown = 0, kYes = 1, kNo = 2;
  alignas(kCacheLine) std::atomic<uint32_t> directReads;
  // PeerState, stored with release after everything it announces (last ring bytes, abort notice).
  alignas(kCacheLine) std::atomic<uint32_t> state;
  uint32_t abortBytes;
  // Note [Doorbell]: bumped by any peer after it wrote to this rank's rings or freed space in a
  // ring this rank writes; the owner FUTEX_WAITs on it. `sleeping` says whether it may be asleep.
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;
  alignas(kCacheLine) std::atomic<uint32_t> sleeping;
  alignas(kCacheLine) uint8_t abortNotice[kAbortCapacity];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

class Segment {
 public:
  // Creates the segment of `rank` in a group of `size`, named `name` (starts with "/"). Returns an
  // empty segment (valid() false) when the name exists already.
  static Segment create(const std::string& name, int rank, int size);
  // Maps the segment that `rank` of a group of `size` created under `name`.
  static Segment open(const std::string& name, int rank, int size);

  Segment() = default;
  Segment(Segment&& other) noexcept { *this = std::move(other); }
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();

  bool valid() const { return mapping_.valid(); }
  const std::string& name() const { return name_; }
  void unlinkName() noexcept;
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(mapping_.base()); }
  // The ring that `sender` writes into this segment's owner.
  Ring ring(int sender) const;

  // Bumps the doorbell and wakes the owner if it may be asleep. Never throws.
  void ringDoorbell() const noexcept;
  // Owner side: marks itself sleeping; returns the doorbell value to sleep on. The caller must
  // check for work after this and before sleepUntilRung (Note [Doorbell]).
  uint32_t prepareToSleep() const noexcept;
  // Sleeps until the doorbell differs from `seen`, a wake, or `limit`; clears the sleeping mark.
  void sleepUntilRung(uint32_t seen, std::chrono::microseconds limit) const noexcept;
  // Clears the sleeping mark without sleeping (work turned up after prepareToSleep).
  void stayAwake() const noexcept;

 private:
  static size_t bytesFor(int size, uint32_t ringBytes);

  detail::SharedMapping mapping_;
  int rank_ = -1;
  int size_ = 0;
  std::string name_;
  std::string nameToUnlink_;  // set for the creator until unlinked
};

// The ring size for a group of `size` ranks: 1 MiB per ordered pair up to 16 ranks, then smaller
// so a segment stays under 16 MiB (never below 64 KiB). Why 1 MiB: messages up to about 1 MiB
// (most chunks of pipelined collectives) complete without waiting for their receiver; four 256 KiB
// pieces in flight let sender and receiver copy at once; and 8 ranks need only 56 MiB of rings.
uint32_t ringBytesFor(int size);

}  // namespace chorus::transport::shm
