// Segment creation, mapping and the doorbell. See segment.h.
//
// Layout: SegmentHeader, then for each other rank (by rank, skipping the owner) a RingControl
// page followed by that ring's bytes. The whole size is rounded up to 2 MiB so MADV_HUGEPAGE can
// back it with huge pages where the kernel allows it for shared memory
// (/sys/kernel/mm/transparent_hugepage/shmem_enabled); either way every page is touched once here,
// because a first touch costs ~10 us on these VMs and the hot path must not pay it.
//
// Note [Doorbell]
// The owner, before sleeping: sleeping = 1; seen = doorbell; look for work; FUTEX_WAIT(doorbell,
// seen). A peer, after writing: doorbell += 1; if (sleeping) FUTEX_WAKE. All four are seq_cst, so
// either the peer sees sleeping == 1 and wakes the owner, or its increment comes before the
// owner's read of `seen`, and then the owner's look for work sees what the peer wrote. The wait is
// not FUTEX_PRIVATE: the word is shared between processes. Cost: one atomic add per pass that
// moved bytes for a peer; a system call only when the peer may be asleep.
#include "transport/shm/segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <new>
#include <utility>

#include "core/check.h"

namespace chorus::transport::shm {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = 2 * 1024 * 1024;

size_t roundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

size_t headerBytes() { return roundUp(sizeof(SegmentHeader), kPage); }
size_t ringSlotBytes(uint32_t ringBytes) { return roundUp(sizeof(RingControl), kPage) + ringBytes; }

void* mapShared(int fd, size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED)
    detail::throwSystemError("mmap", errno, __FILE__, __LINE__);
  ::madvise(base, bytes, MADV_HUGEPAGE);  // advice only: fine if the kernel declines
  return base;
}

// Touches every page so the page tables are filled now, not on the hot path. Reads suffice: the
// pages were populated writable (MAP_POPULATE of a shared mapping).
void prefault(void* base, size_t bytes) {
  volatile const uint8_t* bytesAt = static_cast<const uint8_t*>(base);
  for (size_t offset = 0; offset < bytes; offset += kPage) (void)bytesAt[offset];
}

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
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST)
    return Segment();
  if (fd < 0)
    detail::throwSystemError("shm_open", errno, __FILE__, __LINE__);
  Segment segment;
  segment.name_ = name;
  segment.nameToUnlink_ = name;  // from here on, the destructor removes the name
  segment.rank_ = rank;
  segment.size_ = size;
  uint32_t ringBytes = ringBytesFor(size);
  segment.bytes_ = bytesFor(size, ringBytes);
  try {
    // posix_fallocate, not ftruncate: a full /dev/shm fails here, not with SIGBUS on first touch.
    if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(segment.bytes_))) {
      throw InternalError(
          detail::concat("rank ", rank, " (this process): cannot allocate ", segment.bytes_,
                         " bytes for ", name, " in /dev/shm: ", std::strerror(error),
                         "; make /dev/shm larger (docker: --shm-size) or use CHORUS_BACKEND=tcp"));
    }
    segment.base_ = mapShared(fd, segment.bytes_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  // Write every page once: the memory is allocated and mapped here, not on first use.
  for (size_t offset = 0; offset < segment.bytes_; offset += kPage)
    static_cast<volatile uint8_t*>(segment.base_)[offset] = 0;
  auto* header = new (segment.base_) SegmentHeader;
  header->rank = rank;
  header->size = size;
  header->pid = static_cast<int32_t>(::getpid());
  header->ringBytes = ringBytes;
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
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    detail::throwSystemError("shm_open", errno, __FILE__, __LINE__);
  Segment segment;
  segment.name_ = name;
  segment.rank_ = rank;
  segment.size_ = size;
  struct stat info {};
  try {
    CHORUS_SYSCHECK(::fstat(fd, &info));
    segment.bytes_ = bytesFor(size, ringBytesFor(size));
    CHORUS_CHECK_ARG(static_cast<size_t>(info.st_size) == segment.bytes_, "shared-memory segment ",
                     name, " of rank ", rank, " has ", info.st_size, " bytes, expected ",
                     segment.bytes_, "; do all ranks run the same chorus build and group size?");
    segment.base_ = mapShared(fd, segment.bytes_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  prefault(segment.base_, segment.bytes_);
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
    this->~Segment();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    rank_ = other.rank_;
    size_ = other.size_;
    name_ = std::exchange(other.name_, {});
    nameToUnlink_ = std::exchange(other.nameToUnlink_, {});
  }
  return *this;
}

Segment::~Segment() {
  unlinkName();
  if (base_ != nullptr)
    ::munmap(base_, bytes_);
  base_ = nullptr;
}

void Segment::unlinkName() noexcept {
  if (!nameToUnlink_.empty())
    ::shm_unlink(nameToUnlink_.c_str());
  nameToUnlink_.clear();
}

Ring Segment::ring(int sender) const {
  uint32_t ringBytes = ringBytesFor(size_);
  int slot = sender < rank_ ? sender : sender - 1;
  auto* at = static_cast<uint8_t*>(base_) + headerBytes() + slot * ringSlotBytes(ringBytes);
  return Ring(reinterpret_cast<RingControl*>(at), at + roundUp(sizeof(RingControl), kPage),
              ringBytes);
}

void Segment::ringDoorbell() const noexcept {
  SegmentHeader& header = this->header();
  header.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (header.sleeping.load(std::memory_order_seq_cst) != 0) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header.doorbell), FUTEX_WAKE, INT_MAX,
              nullptr, nullptr, 0);
  }
}

uint32_t Segment::prepareToSleep() const noexcept {
  SegmentHeader& header = this->header();
  header.sleeping.store(1, std::memory_order_seq_cst);
  return header.doorbell.load(std::memory_order_seq_cst);
}

void Segment::sleepUntilRung(uint32_t seen, std::chrono::microseconds limit) const noexcept {
  SegmentHeader& header = this->header();
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limit);
  timespec timeout{static_cast<time_t>(seconds.count()),
                   static_cast<long>((limit - seconds).count() * 1000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header.doorbell), FUTEX_WAIT, seen, &timeout,
            nullptr, 0);
  header.sleeping.store(0, std::memory_order_relaxed);
}

void Segment::stayAwake() const noexcept { header().sleeping.store(0, std::memory_order_relaxed); }

}  // namespace chorus::transport::shm
