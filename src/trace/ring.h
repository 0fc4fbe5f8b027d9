// OperationRing: a preallocated ring of operation records that several threads write and a rare
// reader (a failure dump, the timeline writer) snapshots, without locks and without allocating.
//
// Note [Record ring]
// Every operation a rank runs leaves a Record: the flight recorder's ring keeps the last N (always
// on), the timeline's keeps everything from trace start (Note [Timeline]). A writer claims a slot
// with one fetch_add (its ticket), writes the fields and then publishes the slot's ticket; the
// end of the operation is one more store, made only if the slot still holds that ticket (a ring
// that wrapped past an operation still in flight keeps the newer record). Fields are relaxed
// atomics, so a snapshot taken while writers run is race-free: it reads a slot's ticket before
// and after its fields and keeps the slot only if both agree. Cost per operation: one atomic
// add, about ten plain stores, no lock, no allocation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/collective.h"

namespace chorus::trace {

// A Fingerprint as the words a slot stores it in.
inline constexpr int kFingerprintWords = sizeof(Fingerprint) / sizeof(uint64_t);

enum class RecordKind : uint8_t {
  kOperation,  // a collective, or a send / recv (Fingerprint::collective is kPointToPoint)
  kMark,       // a span a layer above marks (a gradient bucket, a ZeRO gather, a step)
};

// One operation or mark, as read back from a ring.
struct Record {
  uint64_t ticket = 0;  // order of the begin calls on this rank (1, 2, ...)
  RecordKind kind = RecordKind::kOperation;
  uint32_t group = 0;       // registerGroup()'s index (operations), 0 for marks
  Fingerprint fingerprint;  // operations only
  uint64_t bytes = 0;
  // send/recv: the peer's world rank (+ kSendBit for a send; kAnyRank for a recv from any rank,
  // which is what it stays in the record once the sender is known); an operation on CUDA tensors:
  // kDeviceBit (its peer unknown); marks: the caller's index (a bucket number), or -1.
  int64_t detail = -1;
  const char* label = nullptr;  // marks: a string with static storage
  int64_t startNs = 0;          // CLOCK_MONOTONIC, nanoseconds
  int64_t endNs = 0;            // 0 while running; 1 when it ended at a time not recorded
  int64_t arrivedNs = 0;        // when the backend saw every peer arrive (timeline only), or 0
  bool failed = false;
  bool running() const { return endNs == 0; }
  bool endKnown() const { return endNs > 1; }
};

inline constexpr int64_t kSendBit = int64_t{1} << 40;
inline constexpr int64_t kAnyRank = kSendBit - 1;
inline constexpr int64_t kDeviceBit = int64_t{1} << 41;

class OperationRing {
 public:
  // `capacity` slots rounded up to a power of two (a mask, not a division, finds a slot),
  // allocated here; zero records nothing.
  explicit OperationRing(size_t capacity);

  size_t capacity() const { return capacity_; }
  // Claims a slot and fills it from `record` (whose ticket it sets); returns the ticket, 0 when
  // the ring has no slots.
  uint64_t begin(const Record& record) noexcept;
  // Ends the record `ticket` at `endNs` (0: at an unknown time, see Record::endKnown), unless its
  // slot was reused since.
  void end(uint64_t ticket, int64_t endNs, bool failed) noexcept;
  // Notes that the backend saw every peer of record `ticket` arrive at `arrivedNs`.
  void noteArrived(uint64_t ticket, int64_t arrivedNs) noexcept;
  // Notes that every peer of record `ticket` had arrived by its start (no clock read).
  void noteArrivedAtStart(uint64_t ticket) noexcept;
  // The records now in the ring with a ticket above `after`, oldest first (running ones
  // included). Tickets go on rising when a ring is used again (Note [Timeline rings are reused]),
  // so `after` = begun() at a use's start leaves out every record of the uses before.
  std::vector<Record> snapshot(uint64_t after = 0) const;
  // How many records were begun: more than capacity() means the oldest were overwritten.
  uint64_t begun() const noexcept { return next_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<uint64_t> ticket{0};
    std::atomic<uint64_t> fingerprint[kFingerprintWords]{};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> kindAndGroup{0};
    std::atomic<int64_t> detail{0};
    std::atomic<const char*> label{nullptr};
    std::atomic<int64_t> startNs{0};
    std::atomic<int64_t> endNs{0};  // negative: failed at -endNs
    std::atomic<int64_t> arrivedNs{0};
  };
  const size_t capacity_;
  const uint64_t mask_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace chorus::trace
