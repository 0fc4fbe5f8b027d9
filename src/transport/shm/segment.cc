// Segment creation, mapping and the doorbell. See segment.h.
//
// Layout: SegmentHeader, then for each other rank (by rank, skipping the owner) a RingControl
// page followed by that ring's bytes. The whole size is rounded up to 2 MiB so MADV_HUGEPAGE can
// back it with huge pages where the kernel allows it for shared memory; mapping, allocation and
// pre-faulting are SharedMapping's (core/shared_memory.h).
//
// Note [Doorbell]
// The owner, before sleeping: sleeping = 1; seen = doorbell; look for work; FUTEX_WAIT(doorbell,
// seen). A peer, after writing: doorbell += 1; if (sleeping) FUTEX_WAKE. All four are seq_cst, so
// either the peer sees sleeping == 1 and wakes the owner, or its increment comes before the
// owner's read of `seen`, and then the owner's look for work sees what the peer wrote. The wait is
// not FUTEX_PRIVATE: the word is shared between processes. Cost: one atomic add per pass that
// moved bytes for a peer; a system call only when the peer may be asleep.
#include "transport/shm/segment.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <utility>

#include "core/check.h"

namespace chorus::transport::shm {

using detail::futexWait;
using detail::futexWakeAll;
using detail::SharedMapping;

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = 2 * 1024 * 1024;

size_t roundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

size_t headerBytes() { return roundUp(sizeof(SegmentHeader), kPage); }
size_t ringSlotBytes(uint32_t ringBytes) { return roundUp(sizeof(RingControl), kPage) + ringBytes; }

}  // namespace

uint32_t ringBytesFor(int size) {
  uint32_t bytes = 1u << 20;
  while (size > 16 && bytes > (64u << 10) && static_cast<uint64_t>(bytes) * size > (16u << 20))
    bytes /= 2;
  return bytes;
}

size_t Segment::bytesFor(int size, uint32_t ringBytes) {
  return roundUp(headerBytes() + static_cast<size_t>(size - 1) * ringSlotBytes(ringBytes),
                 kHugePage);
}

Segment Segment::create(const std::string& name, int rank, int size) {
  const uint32_t ringBytes = ringBytesFor(size);
  Segment segment;
  segment.mapping_ = SharedMapping::create(name, bytesFor(size, ringBytes), rank);
  if (!segment.mapping_.valid())
    return Segment();  // the name exists already
  segment.name_ = name;
  segment.nameToUnlink_ = name;  // from here on, the destructor removes the name
  segment.rank_ = rank;
  segment.size_ = size;
  auto* header = new (segment.mapping_.base()) SegmentHeader;
  header->rank = rank;
  header->size = size;
  header->pid = static_cast<int32_t>(::getpid());
  header->ringBytes = ringBytes;
  header->probe = SegmentHeader::kProbeValue;
  header->probeAddress = reinterpret_cast<uintptr_t>(&header->probe);
  header->directReads.store(SegmentHeader::kUnknown, std::memory_order_relaxed);
  header->state.store(static_cast<uint32_t>(PeerState::kOpen), std::memory_order_relaxed);
  header->abortBytes = 0;
  header->doorbell.store(0, std::memory_order_relaxed);
  header->sleeping.store(0, std::memory_order_relaxed);
  for (int sender = 0; sender < size; ++sender) {
    if (sender != rank)
      new (segment.ring(sender).control()) RingControl{};
  }
  // Last, with release: a peer that sees the magic sees an initialized segment.
  std::atomic_ref<uint64_t>(header->magic).store(SegmentHeader::kMagic, std::memory_order_release);
  return segment;
}

Segment Segment::open(const std::string& name, int rank, int size) {
  Segment segment;
  segment.mapping_ = SharedMapping::open(name, bytesFor(size, ringBytesFor(size)), rank);
  segment.name_ = name;
  segment.rank_ = rank;
  segment.size_ = size;
  SegmentHeader& header = segment.header();
  uint64_t magic = std::atomic_ref<uint64_t>(header.magic).load(std::memory_order_acquire);
  CHORUS_CHECK_ARG(magic == SegmentHeader::kMagic && header.rank == rank && header.size == size &&
                       header.ringBytes == ringBytesFor(size),
                   "shared-memory segment ", name, " is not rank ", rank, " of a group of ", size,
                   " (it says rank ", header.rank, " of ", header.size,
                   "); do all ranks run the same chorus build?");
  return segment;
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    unlinkName();
    mapping_ = std::move(other.mapping_);
    rank_ = other.rank_;
    size_ = other.size_;
    name_ = std::exchange(other.name_, {});
    nameToUnlink_ = std::exchange(other.nameToUnlink_, {});
  }
  return *this;
}

Segment::~Segment() { unlinkName(); }

void Segment::unlinkName() noexcept {
  if (!nameToUnlink_.empty())
    ::shm_unlink(nameToUnlink_.c_str());
  nameToUnlink_.clear();
}

Ring Segment::ring(int sender) const {
  uint32_t ringBytes = ringBytesFor(size_);
  int slot = sender < rank_ ? sender : sender - 1;
  auto* at =
      reinterpret_cast<uint8_t*>(mapping_.base()) + headerBytes() + slot * ringSlotBytes(ringBytes);
  return Ring(reinterpret_cast<RingControl*>(at), at + roundUp(sizeof(RingControl), kPage),
              ringBytes);
}

void Segment::ringDoorbell() const noexcept {
  SegmentHeader& header = this->header();
  header.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (header.sleeping.load(std::memory_order_seq_cst) != 0)
    futexWakeAll(header.doorbell);
}

uint32_t Segment::prepareToSleep() const noexcept {
  SegmentHeader& header = this->header();
  header.sleeping.store(1, std::memory_order_seq_cst);
  return header.doorbell.load(std::memory_order_seq_cst);
}

void Segment::sleepUntilRung(uint32_t seen, std::chrono::microseconds limit) const noexcept {
  SegmentHeader& header = this->header();
  futexWait(header.doorbell, seen, limit);
  header.sleeping.store(0, std::memory_order_relaxed);
}

void Segment::stayAwake() const noexcept { header().sleeping.store(0, std::memory_order_relaxed); }

}  // namespace chorus::transport::shm
