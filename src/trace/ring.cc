// See Note [Record ring] (ring.h).
#include "trace/ring.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace chorus::trace {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

void packFingerprint(const Fingerprint& fingerprint,
                     std::atomic<uint64_t> (&words)[kFingerprintWords]) {
  uint64_t raw[kFingerprintWords];
  std::memcpy(raw, &fingerprint, sizeof raw);
  for (int i = 0; i < kFingerprintWords; ++i) words[i].store(raw[i], kRelaxed);
}

Fingerprint unpackFingerprint(const std::atomic<uint64_t> (&words)[kFingerprintWords]) {
  uint64_t raw[kFingerprintWords];
  for (int i = 0; i < kFingerprintWords; ++i) raw[i] = words[i].load(kRelaxed);
  Fingerprint fingerprint;
  std::memcpy(&fingerprint, raw, sizeof raw);
  return fingerprint;
}

}  // namespace

static_assert(sizeof(Fingerprint) == kFingerprintWords * sizeof(uint64_t));

OperationRing::OperationRing(size_t capacity)
    : capacity_(capacity > 0 ? std::bit_ceil(capacity) : 0),
      mask_(capacity_ > 0 ? capacity_ - 1 : 0),
      slots_(capacity_ > 0 ? new Slot[capacity_] : nullptr) {}

uint64_t OperationRing::begin(const Record& record) noexcept {
  if (capacity_ == 0)
    return 0;
  const uint64_t ticket = next_.fetch_add(1, kRelaxed) + 1;
  Slot& slot = slots_[(ticket - 1) & mask_];
  slot.ticket.store(0, kRelaxed);  // readers skip the slot while it is rewritten
  std::atomic_thread_fence(std::memory_order_release);
  packFingerprint(record.fingerprint, slot.fingerprint);
  slot.bytes.store(record.bytes, kRelaxed);
  slot.kindAndGroup.store(uint64_t{record.group} | uint64_t(record.kind) << 32, kRelaxed);
  slot.detail.store(record.detail, kRelaxed);
  slot.label.store(record.label, kRelaxed);
  slot.startNs.store(record.startNs, kRelaxed);
  slot.endNs.store(0, kRelaxed);
  slot.arrivedNs.store(0, kRelaxed);
  slot.ticket.store(ticket, std::memory_order_release);
  return ticket;
}

void OperationRing::end(uint64_t ticket, int64_t endNs, bool failed) noexcept {
  if (ticket == 0)
    return;
  Slot& slot = slots_[(ticket - 1) & mask_];
  if (slot.ticket.load(std::memory_order_acquire) != ticket)
    return;  // overwritten by a newer record: the ring wrapped while this one ran
  slot.endNs.store(endNs <= 0 ? (failed ? -1 : 1) : (failed ? -endNs : endNs),
                   std::memory_order_release);
}

void OperationRing::noteArrived(uint64_t ticket, int64_t arrivedNs) noexcept {
  if (ticket == 0)
    return;
  Slot& slot = slots_[(ticket - 1) & mask_];
  if (slot.ticket.load(std::memory_order_acquire) == ticket)
    slot.arrivedNs.store(arrivedNs, std::memory_order_release);
}

void OperationRing::noteArrivedAtStart(uint64_t ticket) noexcept {
  if (ticket == 0)
    return;
  Slot& slot = slots_[(ticket - 1) & mask_];
  if (slot.ticket.load(std::memory_order_acquire) == ticket)
    slot.arrivedNs.store(slot.startNs.load(kRelaxed), std::memory_order_release);
}

std::vector<Record> OperationRing::snapshot(uint64_t after) const {
  std::vector<Record> records;
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = std::max(last > capacity_ ? last - capacity_ + 1 : 1, after + 1);
  if (last < first)
    return records;
  records.reserve(last - first + 1);
  for (uint64_t ticket = first; ticket <= last && capacity_ > 0; ++ticket) {
    const Slot& slot = slots_[(ticket - 1) & mask_];
    if (slot.ticket.load(std::memory_order_acquire) != ticket)
      continue;  // being written, or already reused
    Record record;
    record.ticket = ticket;
    record.fingerprint = unpackFingerprint(slot.fingerprint);
    record.bytes = slot.bytes.load(kRelaxed);
    const uint64_t kindAndGroup = slot.kindAndGroup.load(kRelaxed);
    record.group = static_cast<uint32_t>(kindAndGroup);
    record.kind = static_cast<RecordKind>(kindAndGroup >> 32);
    record.detail = slot.detail.load(kRelaxed);
    record.label = slot.label.load(kRelaxed);
    record.startNs = slot.startNs.load(kRelaxed);
    const int64_t end = slot.endNs.load(std::memory_order_acquire);
    record.endNs = end < 0 ? -end : end;
    record.failed = end < 0;
    record.arrivedNs = slot.arrivedNs.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.ticket.load(kRelaxed) != ticket)
      continue;  // rewritten while read
    records.push_back(record);
  }
  return records;
}

}  // namespace chorus::trace
