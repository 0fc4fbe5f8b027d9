// See Note [Flight recorder] (recorder.h).
#include "trace/recorder.h"

#include <time.h>

#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "core/env.h"

namespace chorus::trace {
namespace {

constexpr size_t kDefaultFlightCapacity = 1024;

size_t flightCapacity() {
  const auto configured = env::integer("CHORUS_RECORDER_SIZE");
  if (!configured)
    return kDefaultFlightCapacity;
  return *configured > 0 ? static_cast<size_t>(*configured) : 0;
}

// Never destroyed (nor the registry): communicators may still run operations while the process's
// static objects are destroyed at exit.
OperationRing& flightRing() {
  static OperationRing* ring = new OperationRing(flightCapacity());
  return *ring;
}

struct Registry {
  std::mutex mutex;
  std::deque<std::string> groups;
  // Timeline rings are never freed before exit: an operation that began in one may end after
  // stopTimeline().
  std::vector<std::unique_ptr<OperationRing>> timelines;
  // The recording timeline's start, on both clocks (Note [Timeline ticks]).
  int64_t startTicks = 0;
  int64_t startNs = 0;
};

Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

std::atomic<OperationRing*> activeTimeline{nullptr};
// Whether timeline times are TSC ticks (else CLOCK_MONOTONIC ns); chosen when a timeline starts.
std::atomic<bool> ticksAreTsc{false};
// The timeline record of the operation the calling thread runs (set only while one records).
thread_local OperationRing* currentRing = nullptr;
thread_local uint64_t currentTicket = 0;
std::atomic<int> worldRank{-1};
std::atomic<int64_t> offsetNs{0};

// Note [Timeline ticks]
// A timeline records up to three times per operation (start, the peers' arrival, end). In the
// VMs chorus is measured on, a precise CLOCK_MONOTONIC read costs 30-35 ns and the TSC 13 ns, so
// where the kernel itself keeps time by the TSC (its clocksource is "tsc": invariant and synced
// across cores), the timeline records raw TSC ticks and converts them once, when it stops, by the
// line through (ticks, ns) read at its start and at its stop. Elsewhere it records nanoseconds.
bool kernelClockIsTsc() {
  std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return static_cast<bool>(source >> name) && name == "tsc";
}

int64_t timelineNow() noexcept {
#if defined(__x86_64__)
  if (ticksAreTsc.load(std::memory_order_relaxed))
    return static_cast<int64_t>(__rdtsc());
#endif
  return monotonicNs();
}

// Rewrites a time of `record` from ticks to nanoseconds (0 and 1 mean "none" and stay).
void ticksToNs(int64_t& time, int64_t ticks0, int64_t ns0, int64_t ticks1, int64_t ns1) {
  if (time <= 1)
    return;
  const __int128 elapsed = static_cast<__int128>(time - ticks0) * (ns1 - ns0);
  time = ns0 + static_cast<int64_t>(ticks1 > ticks0 ? elapsed / (ticks1 - ticks0) : 0);
}

}  // namespace

int64_t monotonicNs() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

uint32_t registerGroup(std::string description) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.groups.push_back(std::move(description));
  return static_cast<uint32_t>(r.groups.size() - 1);
}

std::string groupDescription(uint32_t group) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return group < r.groups.size() ? r.groups[group] : "?";
}

Ticket beginOperation(uint32_t group,
                      const Fingerprint& fingerprint,
                      uint64_t bytes,
                      int64_t coarseNowNs,
                      int64_t detail) noexcept {
  Ticket ticket;
  Record record;
  record.group = group;
  record.fingerprint = fingerprint;
  record.bytes = bytes;
  record.detail = detail;
  OperationRing* timeline = activeTimeline.load(std::memory_order_acquire);
  record.startNs = coarseNowNs;
  ticket.flight = flightRing().begin(record);
  if (timeline != nullptr) {
    record.startNs = timelineNow();
    ticket.timeline = timeline;
    ticket.timelineTicket = timeline->begin(record);
    currentRing = timeline;
    currentTicket = ticket.timelineTicket;
  }
  return ticket;
}

void noteAllArrived(bool waited) noexcept {
  if (currentRing == nullptr)
    return;
  if (waited)
    currentRing->noteArrived(currentTicket, timelineNow());
  else
    currentRing->noteArrivedAtStart(currentTicket);
}

Ticket beginMark(const char* label, int64_t index) noexcept {
  Ticket ticket;
  OperationRing* timeline = activeTimeline.load(std::memory_order_acquire);
  if (timeline == nullptr)
    return ticket;
  Record record;
  record.kind = RecordKind::kMark;
  record.label = label;
  record.detail = index;
  record.startNs = timelineNow();
  ticket.timeline = timeline;
  ticket.timelineTicket = timeline->begin(record);
  return ticket;
}

void end(const Ticket& ticket, bool failed) noexcept {
  if (ticket.timeline == nullptr) {
    // The flight ring alone keeps no end time: that it ended, and how, is what a dump needs, and
    // a clock read would be a third of the recorder's cost per operation.
    flightRing().end(ticket.flight, 0, failed);
    return;
  }
  flightRing().end(ticket.flight, 0, failed);
  ticket.timeline->end(ticket.timelineTicket, timelineNow(), failed);
  if (currentRing == ticket.timeline && currentTicket == ticket.timelineTicket)
    currentRing = nullptr;
}

void setRank(int rank) noexcept { worldRank.store(rank); }

int rank() noexcept {
  const int known = worldRank.load();
  if (known >= 0)
    return known;
  return static_cast<int>(env::integer("CHORUS_RANK").value_or(0));
}

void setClockOffset(int64_t offset) noexcept { offsetNs.store(offset); }
int64_t clockOffset() noexcept { return offsetNs.load(); }

std::vector<Record> flightRecords() { return flightRing().snapshot(); }

bool startTimeline(size_t capacity) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (activeTimeline.load() != nullptr)
    return false;
  r.timelines.push_back(std::make_unique<OperationRing>(capacity));
  static const bool tsc = kernelClockIsTsc();
  ticksAreTsc.store(tsc, std::memory_order_relaxed);
  r.startTicks = timelineNow();
  r.startNs = monotonicNs();
  activeTimeline.store(r.timelines.back().get(), std::memory_order_release);
  return true;
}

std::vector<Record> stopTimeline(uint64_t& dropped) {
  OperationRing* ring = nullptr;
  int64_t startTicks = 0;
  int64_t startNs = 0;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    ring = activeTimeline.exchange(nullptr);
    startTicks = r.startTicks;
    startNs = r.startNs;
  }
  dropped = 0;
  if (ring == nullptr)
    return {};
  const uint64_t begun = ring->begun();
  dropped = begun > ring->capacity() ? begun - ring->capacity() : 0;
  std::vector<Record> records = ring->snapshot();
  const int64_t stopTicks = timelineNow();
  const int64_t stopNs = monotonicNs();
  if (ticksAreTsc.load(std::memory_order_relaxed)) {
    for (Record& record : records) {
      for (int64_t* time : {&record.startNs, &record.endNs, &record.arrivedNs})
        ticksToNs(*time, startTicks, startNs, stopTicks, stopNs);
    }
  }
  return records;
}

bool timelineActive() noexcept { return activeTimeline.load(std::memory_order_relaxed) != nullptr; }

}  // namespace chorus::trace
