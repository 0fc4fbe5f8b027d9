// ShmGroup (see shm_group.h): segments, counters, and waiting with a futex.
#include "backend/shm/shm_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>

#include "core/check.h"
#include "core/error_codec.h"
#include "transport/shm/transport.h"

namespace chorus::backend::shm {
namespace {

constexpr size_t kCacheLine = 64;
constexpr size_t kMaxErrorBytes = 8192;
// A wait first spins (a peer that is running publishes within a microsecond or so), then yields
// the core between passes, then sleeps on the bell. With more ranks than cores the peer it waits
// for may need this very core, so it skips the spin and yields at once (spinning there cost 4
// ranks on 2 cores ~100 µs per small allreduce, against ~3.5 µs for 2 ranks that spin).
constexpr int kSpinPasses = 4000;
constexpr int kYieldPasses = 2000;

int spinPassesFor(int ranks) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 && ranks > cores ? 0 : kSpinPasses;
}
// Longest single sleep on the bell: how soon the deadline, aborts and dead peers are noticed.
constexpr std::chrono::milliseconds kSleepSlice{50};

enum State : uint32_t { kOpen = 0, kClosed = 1, kFailed = 2 };

struct alignas(kCacheLine) Counter {
  std::atomic<uint64_t> value{0};
};

int futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return static_cast<int>(
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0));
}

}  // namespace

struct ShmGroup::ControlBlock {
  Counter steps[static_cast<int>(Step::kCount)];
  alignas(kCacheLine) transport::Fingerprint fingerprints[2];  // by sequence parity
  alignas(kCacheLine) std::atomic<uint32_t> state{kOpen};
  pid_t pid = 0;
  // Rank 0's block only: the group's failure flag (failed rank + 1), the bell and its sleepers.
  alignas(kCacheLine) std::atomic<int32_t> failedRank{0};
  alignas(kCacheLine) std::atomic<uint32_t> bell{0};
  std::atomic<uint32_t> sleepers{0};
  alignas(kCacheLine) uint32_t errorBytes = 0;
  uint8_t error[kMaxErrorBytes];
};

namespace {

constexpr size_t alignUp(size_t n) { return (n + 4095) / 4096 * 4096; }

}  // namespace

struct ShmGroup::Segment {
  void* base = MAP_FAILED;
  size_t bytes = 0;

  static size_t controlBytes() { return alignUp(sizeof(ControlBlock)); }
  static size_t totalBytes() {
    return controlBytes() + 2 * ShmGroup::kSmallSlotBytes + 2 * ShmGroup::kChunkSlotBytes;
  }
  ~Segment() {
    if (base != MAP_FAILED)
      ::munmap(base, bytes);
  }
  ControlBlock* control() const { return static_cast<ControlBlock*>(base); }
  std::byte* small(uint64_t parity) const {
    return static_cast<std::byte*>(base) + controlBytes() +
           (parity & 1) * ShmGroup::kSmallSlotBytes;
  }
  std::byte* chunk(uint64_t parity) const {
    return static_cast<std::byte*>(base) + controlBytes() + 2 * ShmGroup::kSmallSlotBytes +
           (parity & 1) * ShmGroup::kChunkSlotBytes;
  }
};

ShmGroup::ShmGroup(int rank,
                   int size,
                   const std::shared_ptr<store::Store>& store,
                   const std::string& scope,
                   Deadline deadline)
    : rank_(rank), size_(size), spinPasses_(spinPassesFor(size)), segments_(size) {
  const std::string name =
      detail::concat(transport::shm::shmSegmentPrefix(), "native",
                     std::hash<std::string>{}(scope) % 1000000007, "-r", rank, "-", ::getpid());
  segments_[rank] = mapSegment(name, /*create=*/true, rank);
  struct Unlink {
    std::string name;
    ~Unlink() { ::shm_unlink(name.c_str()); }
  } unlinkAtEnd{name};  // also when setup fails half-way
  ControlBlock* mine = new (segments_[rank]->base) ControlBlock();
  mine->pid = ::getpid();
  store->set(detail::concat("shm/name/", rank), store::toBytes(name));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank)
      continue;
    std::string peerName = store::toString(store->get(detail::concat("shm/name/", peer), deadline));
    segments_[peer] = mapSegment(peerName, /*create=*/false, rank);
  }
  // Nobody may unlink before everyone has mapped: a barrier through the store.
  store->set(detail::concat("shm/mapped/", rank), store::toBytes("1"));
  for (int peer = 0; peer < size; ++peer) store->get(detail::concat("shm/mapped/", peer), deadline);
}

ShmGroup::~ShmGroup() { close(); }

std::unique_ptr<ShmGroup::Segment> ShmGroup::mapSegment(const std::string& name,
                                                        bool create,
                                                        int rank) {
  const int flags = create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR;
  const int fd = ::shm_open(name.c_str(), flags, 0600);
  auto fail = [&](const char* call) {
    throw InternalError(detail::concat("rank ", rank, " (this process): ", call, " of ", name,
                                       " failed: ", std::strerror(errno),
                                       "; is /dev/shm mounted and large enough (docker: "
                                       "--shm-size)? CHORUS_BACKEND=tcp avoids it"));
  };
  if (fd < 0)
    fail("shm_open");
  auto segment = std::make_unique<ShmGroup::Segment>();
  segment->bytes = ShmGroup::Segment::totalBytes();
  // posix_fallocate, not ftruncate: a full /dev/shm is an error here, not a SIGBUS on first touch.
  if (create) {
    if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(segment->bytes))) {
      ::close(fd);
      errno = error;
      fail("posix_fallocate");
    }
  }
  segment->base =
      ::mmap(nullptr, segment->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (segment->base == MAP_FAILED)
    fail("mmap");
  if (create)
    std::memset(segment->base, 0, segment->bytes);  // pre-fault: no page faults on the hot path
  return segment;
}

ShmGroup::ControlBlock& ShmGroup::block(int rank) const { return *segments_[rank]->control(); }

std::byte* ShmGroup::smallSlot(int rank, uint64_t parity) const {
  return segments_[rank]->small(parity);
}

std::byte* ShmGroup::chunkSlot(int rank, uint64_t parity) const {
  return segments_[rank]->chunk(parity);
}

void ShmGroup::setFingerprint(uint64_t sequence, const transport::Fingerprint& fingerprint) {
  block(rank_).fingerprints[sequence & 1] = fingerprint;
}

transport::Fingerprint ShmGroup::fingerprint(int rank, uint64_t sequence) const {
  return block(rank).fingerprints[sequence & 1];
}

void ShmGroup::publish(Step step, uint64_t value) {
  block(rank_).steps[static_cast<int>(step)].value.store(value, std::memory_order_seq_cst);
  ControlBlock& hub = block(0);
  if (hub.sleepers.load(std::memory_order_seq_cst) > 0) {
    hub.bell.fetch_add(1, std::memory_order_seq_cst);
    futex(&hub.bell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void ShmGroup::throwGroupFailure() const {
  const int failed = block(0).failedRank.load(std::memory_order_acquire) - 1;
  const ControlBlock& reporter = block(failed);
  std::vector<uint8_t> encoded(reporter.error, reporter.error + reporter.errorBytes);
  if (failed == rank_)
    std::rethrow_exception(detail::decodeError(encoded, "", failed));
  std::rethrow_exception(
      detail::decodeError(encoded,
                          detail::concat("rank ", rank_, " (this process): aborted because rank ",
                                         failed, " reported: "),
                          failed));
}

// Throws if the group failed; when `slow`, also checks that every peer is alive and open.
void ShmGroup::checkHealthy(bool slow) const {
  if (block(0).failedRank.load(std::memory_order_acquire) != 0)
    throwGroupFailure();
  if (!slow)
    return;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_)
      continue;
    const ControlBlock& theirs = block(peer);
    if (theirs.state.load(std::memory_order_acquire) == kClosed) {
      throw PeerError(detail::concat("rank ", rank_, " (this process): rank ", peer,
                                     " has closed its communicator, so this collective cannot "
                                     "complete"),
                      peer);
    }
    if (::kill(theirs.pid, 0) != 0 && errno == ESRCH) {
      throw PeerError(detail::concat("rank ", rank_, " (this process): rank ", peer,
                                     " closed its connection unexpectedly (the process died or "
                                     "was killed)"),
                      peer);
    }
  }
}

void ShmGroup::sleepOnBell(uint32_t seen, Deadline deadline) {
  auto slice = std::min<std::chrono::milliseconds>(kSleepSlice, deadline.remaining());
  if (slice.count() <= 0)
    return;
  timespec timeout{static_cast<time_t>(slice.count() / 1000),
                   static_cast<long>(slice.count() % 1000) * 1000000L};
  futex(&block(0).bell, FUTEX_WAIT, seen, &timeout);
}

void ShmGroup::waitAll(Step step, uint64_t value, Deadline deadline) {
  const int index = static_cast<int>(step);
  auto behind = [&](std::vector<int>* ranks) {
    bool any = false;
    for (int peer = 0; peer < size_; ++peer) {
      if (block(peer).steps[index].value.load(std::memory_order_acquire) >= value)
        continue;
      any = true;
      if (ranks == nullptr)
        break;
      ranks->push_back(peer);
    }
    return any;
  };
  for (int pass = 0; pass < spinPasses_ + kYieldPasses; ++pass) {
    if (!behind(nullptr))
      return;
    checkHealthy(false);
    if (pass >= spinPasses_)
      sched_yield();
  }
  ControlBlock& hub = block(0);
  while (true) {
    hub.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = hub.bell.load(std::memory_order_seq_cst);
    const bool waiting = behind(nullptr);
    if (waiting)
      sleepOnBell(seen, deadline);
    hub.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (!waiting || !behind(nullptr))
      return;
    checkHealthy(true);
    if (deadline.expired()) {
      std::vector<int> late;
      behind(&late);
      auto error = std::make_exception_ptr(transport::makeTimeoutError(rank_, late));
      fail(error);
      std::rethrow_exception(error);
    }
  }
}

void ShmGroup::fail(std::exception_ptr error) noexcept {
  ControlBlock& mine = block(rank_);
  if (block(0).failedRank.load(std::memory_order_acquire) != 0)
    return;  // someone failed first; theirs is the group's error
  // The record is written before the flag is raised, so whoever sees the flag reads it whole.
  // (If another rank raises the flag first, this record is simply never read.)
  try {
    std::vector<uint8_t> encoded = detail::encodeError(error);
    mine.errorBytes = static_cast<uint32_t>(std::min(encoded.size(), kMaxErrorBytes));
    std::memcpy(mine.error, encoded.data(), mine.errorBytes);
  } catch (...) {
    mine.errorBytes = 0;  // decodeError turns an empty record into a PeerError naming this rank
  }
  int32_t none = 0;
  block(0).failedRank.compare_exchange_strong(none, rank_ + 1, std::memory_order_acq_rel);
  mine.state.store(kFailed, std::memory_order_release);
  ControlBlock& hub = block(0);
  hub.bell.fetch_add(1, std::memory_order_seq_cst);
  futex(&hub.bell, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmGroup::close() noexcept {
  if (closed_ || segments_[rank_] == nullptr)
    return;
  closed_ = true;
  uint32_t open = kOpen;
  block(rank_).state.compare_exchange_strong(open, kClosed);
  ControlBlock& hub = block(0);
  hub.bell.fetch_add(1, std::memory_order_seq_cst);
  futex(&hub.bell, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace chorus::backend::shm
