// ShmGroup (see shm_group.h): segments, counters, and waiting with a futex.
#include "backend/shm/shm_group.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>

#include "core/check.h"
#include "core/copy_bytes.h"
#include "core/env.h"
#include "core/error_codec.h"
#include "core/shared_memory.h"
#include "core/stall_watch.h"
#include "transport/shm/bootstrap.h"
#include "transport/transport.h"

namespace chorus::backend::shm {
namespace {

constexpr size_t kCacheLine = 64;
constexpr uint64_t kProbeValue = 0x63686f7275732121;  // "chorus!!"
constexpr size_t kMaxErrorBytes = 8192;
// A wait first spins (a peer that is running publishes within a microsecond or so), then yields
// the core between passes, then sleeps on the bell. With more ranks than cores the peer it waits
// for may need this very core, so it skips the spin and yields at once (spinning there cost 4
// ranks on 2 cores ~100 µs per small allreduce, against ~3.5 µs for 2 ranks that spin).
constexpr int kSpinPasses = 4000;
constexpr int kYieldPasses = 2000;
// Yielding also ends after this long. On a loaded machine one sched_yield can hand the core away
// for a whole time slice: 2000 of them took seconds (busy loops on both cores), and a dead peer,
// an abort or the deadline went unnoticed until they were done (only the sliced sleep below
// checks for them). Unloaded, the 2000 passes take about a millisecond.
constexpr std::chrono::milliseconds kMaxYieldTime{2};

int spinPassesFor(int ranks) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 && ranks > cores ? 0 : kSpinPasses;
}
// Longest single sleep on the bell: how soon the deadline, aborts and dead peers are noticed.
constexpr std::chrono::milliseconds kSleepSlice{50};
// Longest sleep while polling transfers (pollWhileWaiting): a peer's message sits in the
// transport's ring, unread, for at most this long.
constexpr std::chrono::milliseconds kPollSlice{1};

enum State : uint32_t { kOpen = 0, kClosed = 1, kFailed = 2 };

struct alignas(kCacheLine) Counter {
  std::atomic<uint64_t> value{0};
};

// Note [Arrival record]: a rank arrives at collective s by filling its record of parity s & 1
// (the fingerprint, and the data when it fits inline) and then storing s in it. A peer that waits
// for s polls that word, and in the same pass it prefetches the record's other lines that hold
// the data it will read (waitArrivals): they are written before s, so by the pass that sees s they
// are on their way too, and a small collective costs one round of cache-line transfers per peer.
// (Before, the counter, the fingerprint and the data were apart, fetched one after the other; a
// record of one line held 32 bytes, and 64-256 bytes waited for a second round.) The number, the
// fingerprint and the first 24 bytes of data share the first line. Two records suffice: a rank
// arrives at s + 2 only after every rank arrived at s + 1, which each does only after it has read
// what it needed of s. For the same reason a record holds s, or s - 2 while its rank has not yet
// arrived at s, when a rank waits for s: never s + 2, so "the record of parity s & 1 is below s"
// is "behind".
struct alignas(kCacheLine) ArrivalRecord {
  std::atomic<uint64_t> sequence{0};
  Fingerprint fingerprint;
  std::byte data[ShmGroup::kInlineBytes];
};
static_assert(offsetof(ArrivalRecord, data) == kCacheLine - 24,
              "the first 24 bytes of data share the number's cache line");
static_assert(sizeof(ArrivalRecord) == offsetof(ArrivalRecord, data) + ShmGroup::kInlineBytes,
              "an arrival record is whole cache lines of data");

constexpr int kArrivedIndex = static_cast<int>(Step::kArrived);
static_assert(kArrivedIndex == 0, "the counters in ControlBlock::steps follow kArrived");

}  // namespace

struct ControlBlock {
  ArrivalRecord arrivals[2];                          // by sequence parity
  Counter steps[static_cast<int>(Step::kCount) - 1];  // kCopied, kReduced, kDone
  alignas(kCacheLine) std::atomic<uint32_t> state{kOpen};
  pid_t pid = 0;
  // For the direct-read probe: `probe` holds kProbeValue, at `probeAddress` in the owner's memory.
  uint64_t probe = 0;
  uintptr_t probeAddress = 0;
  // Rank 0's block only: the group's failure flag (failed rank + 1), the bell and its sleepers.
  alignas(kCacheLine) std::atomic<int32_t> failedRank{0};
  alignas(kCacheLine) std::atomic<uint32_t> bell{0};
  std::atomic<uint32_t> sleepers{0};
  alignas(kCacheLine) uint32_t errorBytes = 0;
  uint8_t error[kMaxErrorBytes];
};

namespace {

using detail::futexWait;
using detail::futexWakeAll;
using detail::SharedMapping;

// A rank's segment: its ControlBlock (page-aligned), two small slots, two chunk slots.
constexpr size_t kControlBytes = (sizeof(ControlBlock) + 4095) / 4096 * 4096;
constexpr size_t kSegmentBytes =
    kControlBytes + 2 * ShmGroup::kSmallSlotBytes + 2 * ShmGroup::kChunkSlotBytes;

std::byte* smallSlotIn(const SharedMapping& segment, uint64_t parity) {
  return segment.base() + kControlBytes + (parity & 1) * ShmGroup::kSmallSlotBytes;
}

std::byte* chunkSlotIn(const SharedMapping& segment, uint64_t parity) {
  return segment.base() + kControlBytes + 2 * ShmGroup::kSmallSlotBytes +
         (parity & 1) * ShmGroup::kChunkSlotBytes;
}

}  // namespace

ShmGroup::ShmGroup(int rank,
                   int size,
                   detail::RankNames names,
                   const std::shared_ptr<store::Store>& store,
                   const std::string& scope,
                   Deadline deadline)
    : rank_(rank),
      size_(size),
      names_(std::move(names)),
      spinPasses_(spinPassesFor(size)),
      segments_(size) {
  transport::TransportOptions options;
  options.rank = rank;
  options.size = size;
  options.names = names_;
  options.store = store;
  options.deadline = deadline;
  std::string ownName;
  struct Unlink {
    const std::string& name;
    ~Unlink() {
      if (!name.empty())
        ::shm_unlink(name.c_str());
    }
  } unlinkAtEnd{ownName};  // also when setup fails half-way
  std::vector<std::string> mapped =
      transport::shm::exchangeSegments(transport::shm::SegmentExchange{
          options, detail::concat("native", std::hash<std::string>{}(scope) % 1000000007, "-"),
          "shm backend setup",
          [&](const std::string& name) {
            segments_[rank] = SharedMapping::create(name, kSegmentBytes, rank);
            if (!segments_[rank].valid())
              return false;
            ownName = name;
            ControlBlock* mine = new (segments_[rank].base()) ControlBlock();
            mine->pid = ::getpid();
            mine->probe = kProbeValue;
            mine->probeAddress = reinterpret_cast<uintptr_t>(&mine->probe);
            return true;
          },
          [&](int peer, const std::string& name) {
            segments_[peer] = SharedMapping::open(name, kSegmentBytes, rank);
          },
          // Direct reads are used only if every rank can read every peer (the choice changes the
          // protocol).
          [&] { return std::string(canReadEveryPeer() ? "1" : "0"); }});
  peerProcesses_.resize(size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank)
      peerProcesses_[peer] = ProcessWatch(block(peer).pid);
  }
  directReads_ = std::all_of(mapped.begin(), mapped.end(),
                             [](const std::string& value) { return value == "1"; });
}

// Reads each peer's probe word with process_vm_readv. Fails (quietly) where the kernel refuses
// (EPERM: no CAP_SYS_PTRACE over the peer, Yama ptrace_scope >= 1; ENOSYS; a seccomp filter) or
// CHORUS_SHM_DIRECT=0 turns direct reads off.
bool ShmGroup::canReadEveryPeer() const {
  if (!detail::CrossMemoryReader::enabled())
    return false;
  for (int peer = 0; peer < size_; ++peer) {
    const ControlBlock& theirs = block(peer);
    if (!detail::CrossMemoryReader::canRead(theirs.pid, theirs.probeAddress, kProbeValue))
      return false;
  }
  return true;
}

void ShmGroup::readFrom(int rank, void* to, uintptr_t from, size_t bytes) {
  const int error = reader_.read(block(rank).pid, to, from, bytes);
  if (error == 0)
    return;
  throwIfFailed();  // a failure or a death explains it best
  checkPeer(rank);
  if (error == ESRCH) {  // exiting: its memory is gone before its pidfd says so
    throw PeerError(detail::concat("rank ", names_(rank_), " (this process): rank ", names_(rank),
                                   " died (or was killed) while this rank was reading its "
                                   "buffer"),
                    names_(rank));
  }
  throw InternalError(detail::concat("rank ", names_(rank_), " (this process): reading ", bytes,
                                     " bytes from rank ", names_(rank),
                                     "'s buffer failed: ", std::strerror(error),
                                     " (set CHORUS_SHM_DIRECT=0 to copy through shared "
                                     "memory instead)"));
}

ShmGroup::~ShmGroup() { close(); }

ControlBlock& ShmGroup::block(int rank) const {
  return *reinterpret_cast<ControlBlock*>(segments_[rank].base());
}

std::byte* ShmGroup::smallSlot(int rank, uint64_t parity) const {
  return smallSlotIn(segments_[rank], parity);
}

std::byte* ShmGroup::chunkSlot(int rank, uint64_t parity) const {
  return chunkSlotIn(segments_[rank], parity);
}

std::atomic<uint64_t>& ShmGroup::counter(int rank, int index, uint64_t value) const {
  ControlBlock& theirs = block(rank);
  return index == kArrivedIndex ? theirs.arrivals[value & 1].sequence
                                : theirs.steps[index - 1].value;
}

void ShmGroup::arrive(uint64_t sequence,
                      const Fingerprint& fingerprint,
                      const void* data,
                      size_t bytes) {
  ArrivalRecord& record = block(rank_).arrivals[sequence & 1];
  record.fingerprint = fingerprint;
  std::byte* to = bytes <= kInlineBytes ? record.data : smallSlot(rank_, sequence);
  if (bytes > 0 && to != data)
    std::memcpy(to, data, bytes);
  announce(record.sequence, sequence);
}

const Fingerprint& ShmGroup::arrivalFingerprint(int rank, uint64_t sequence) const {
  return block(rank).arrivals[sequence & 1].fingerprint;
}

const std::byte* ShmGroup::arrivalData(int rank, uint64_t sequence, size_t bytes) const {
  return bytes <= kInlineBytes ? block(rank).arrivals[sequence & 1].data
                               : smallSlot(rank, sequence);
}

void ShmGroup::publish(Step step, uint64_t value) {
  CHORUS_ASSERT(step != Step::kArrived);
  announce(counter(rank_, static_cast<int>(step), value), value);
}

void ShmGroup::announce(std::atomic<uint64_t>& counter, uint64_t value) {
  counter.store(value, std::memory_order_seq_cst);  // seq_cst: against the sleepers check below
  ControlBlock& hub = block(0);
  if (hub.sleepers.load(std::memory_order_seq_cst) > 0) {
    hub.bell.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(hub.bell);
  }
}

void ShmGroup::throwGroupFailure() const {
  const int failed = block(0).failedRank.load(std::memory_order_acquire) - 1;
  const ControlBlock& reporter = block(failed);
  std::vector<uint8_t> encoded(reporter.error, reporter.error + reporter.errorBytes);
  if (failed == rank_)
    std::rethrow_exception(detail::decodeError(encoded, "", names_(failed)));
  std::rethrow_exception(detail::decodeError(
      encoded,
      detail::concat("rank ", names_(rank_), " (this process): aborted because rank ",
                     names_(failed), " reported: "),
      names_(failed)));
}

void ShmGroup::throwIfFailed() const {
  if (block(0).failedRank.load(std::memory_order_acquire) != 0)
    throwGroupFailure();
}

bool ShmGroup::isBehind(int rank, int index, uint64_t value) const {
  return counter(rank, index, value).load(std::memory_order_acquire) < value;
}

// A peer whose block says kClosed closed its communicator on purpose (close() sets it only from
// kOpen, never after a failure), whether or not its process has exited since: the error says so,
// not that it died (a rank that caught an error of its own and returned used to be "killed").
void ShmGroup::checkPeer(int peer) const {
  const bool gone = peerProcesses_[peer].gone();
  if (block(peer).state.load(std::memory_order_acquire) == kClosed) {
    throw PeerError(detail::concat("rank ", names_(rank_), " (this process): rank ", names_(peer),
                                   " has closed its communicator", gone ? " and exited" : "",
                                   ", so this collective cannot complete"),
                    names_(peer));
  }
  if (gone)
    throw transport::makeCrashedPeerError(names_(rank_), names_(peer));
}

// Note [Only needed peers fail a wait]: a rank that has published what this wait needs may leave
// at once (the last step of a collective needs nothing more of it), so a closed or dead rank fails
// the wait only if it is still behind. Its counter is read again after its state: a peer publishes
// before it closes, so a counter read after the state was seen shows everything it published.
// Deaths are checked first: a peer that closed may have done so because it saw that death. The
// same holds for the group's failure: one raised after every rank got there (a rank that finished
// this step, then aborted) is left to the next wait or operation, which raises it.
void ShmGroup::throwIfFailedWhileBehind(int index, uint64_t value) const {
  if (block(0).failedRank.load(std::memory_order_acquire) == 0)
    return;
  for (int peer = 0; peer < size_; ++peer) {
    if (isBehind(peer, index, value))
      throwGroupFailure();
  }
}

void ShmGroup::checkNeededPeers(int index, uint64_t value) const {
  throwIfFailedWhileBehind(index, value);
  for (int pass = 0; pass < 2; ++pass) {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || !isBehind(peer, index, value))
        continue;
      const bool closed = block(peer).state.load(std::memory_order_acquire) == kClosed;
      const bool left = pass == 0 ? peerProcesses_[peer].gone() && !closed : closed;
      if (left && isBehind(peer, index, value))
        checkPeer(peer);
    }
  }
}

void ShmGroup::sleepOnBell(uint32_t seen, Deadline deadline) {
  auto slice = std::min<std::chrono::milliseconds>(pollSoon_ ? kPollSlice : kSleepSlice,
                                                   deadline.remaining());
  if (slice.count() <= 0)
    return;
  futexWait(block(0).bell, seen, slice);
}

bool ShmGroup::anyBehind(int index, uint64_t value, std::vector<int>* late) const {
  bool any = false;
  for (int peer = 0; peer < size_; ++peer) {
    if (!isBehind(peer, index, value))
      continue;
    any = true;
    if (late == nullptr)
      break;
    late->push_back(names_(peer));  // for the stall report and the TimeoutError
  }
  return any;
}

void ShmGroup::waitAll(Step step, uint64_t value, Deadline deadline) {
  waitUntil(static_cast<int>(step), value, deadline, 0);
}

bool ShmGroup::waitArrivals(uint64_t sequence, size_t bytes, Deadline deadline) {
  const size_t inlineBytes = bytes <= kInlineBytes ? bytes : 0;  // else in the small slot
  const size_t firstLineBytes = kCacheLine - offsetof(ArrivalRecord, data);
  const size_t lines = inlineBytes > firstLineBytes
                           ? (inlineBytes - firstLineBytes + kCacheLine - 1) / kCacheLine
                           : 0;
  return waitUntil(kArrivedIndex, sequence, deadline, lines);
}

bool ShmGroup::waitUntil(int index, uint64_t value, Deadline deadline, size_t touchLines) {
  Clock::time_point yieldUntil = Clock::time_point::max();
  for (int pass = 0; pass < spinPasses_ + kYieldPasses; ++pass) {
    for (int peer = 0; touchLines > 0 && peer < size_; ++peer) {
      if (peer == rank_)
        continue;  // its own record is in its cache already
      const std::byte* lines = reinterpret_cast<const std::byte*>(&block(peer).arrivals[value & 1]);
      for (size_t line = 1; line <= touchLines; ++line)
        __builtin_prefetch(lines + line * kCacheLine);  // a hint: no access, so no data race
    }
    if (!anyBehind(index, value, nullptr))
      return pass > 0;
    throwIfFailedWhileBehind(index, value);
    if (poll_)
      pollSoon_ = poll_();
    if (pass < spinPasses_)
      continue;
    if (pass == spinPasses_)
      yieldUntil = Clock::now() + kMaxYieldTime;
    else if (Clock::now() >= yieldUntil)
      break;
    sched_yield();
  }
  ControlBlock& hub = block(0);
  while (true) {
    hub.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = hub.bell.load(std::memory_order_seq_cst);
    if (poll_) {  // after `seen`: a wakeSleepers() from here on ends the sleep below
      try {
        pollSoon_ = poll_();
      } catch (...) {
        hub.sleepers.fetch_sub(1, std::memory_order_seq_cst);
        throw;
      }
    }
    const bool waiting = anyBehind(index, value, nullptr);
    if (waiting)
      sleepOnBell(seen, deadline);
    hub.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (!waiting || !anyBehind(index, value, nullptr))
      return true;
    checkNeededPeers(index, value);
    if (Clock::now() >= stall::nextCheckAt()) {
      std::vector<int> late;
      anyBehind(index, value, &late);
      stall::onStalled(late);
    }
    if (deadline.expired()) {
      std::vector<int> late;
      anyBehind(index, value, &late);
      auto error = std::make_exception_ptr(transport::makeTimeoutError(names_(rank_), late));
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
  futexWakeAll(hub.bell);
}

void ShmGroup::wakeSleepers() noexcept {
  if (!segments_[rank_].valid())
    return;
  ControlBlock& hub = block(0);
  hub.bell.fetch_add(1, std::memory_order_seq_cst);
  if (hub.sleepers.load(std::memory_order_seq_cst) > 0)  // as announce(): none, no system call
    futexWakeAll(hub.bell);
}

void ShmGroup::close() noexcept {
  if (closed_ || !segments_[rank_].valid())
    return;
  closed_ = true;
  uint32_t open = kOpen;
  block(rank_).state.compare_exchange_strong(open, kClosed);
  ControlBlock& hub = block(0);
  hub.bell.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(hub.bell);
}

}  // namespace chorus::backend::shm
