// See Note [Flight recorder] (recorder.h).
#include "trace/recorder.h"

#include <bit>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

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

// Note [Timeline rings are reused]
// An operation that began while a timeline recorded may end after stopTimeline(), and writes its
// end into the ring it began in: so a timeline's ring is never freed before exit. It is used
// again instead, by the next timeline of the same capacity, so that a program that starts and
// stops timelines over and over (one per epoch, say) keeps one ring, not one per timeline (23 MB
// each at the default capacity). Tickets go on rising across uses, and a use reads back only the
// tickets above the count at its start. A late end of an earlier use's operation then finds
// either its own record, which the new use leaves out, or a newer ticket in the slot, and changes
// nothing (Note [Record ring]). An operation that read the active ring just before a stop and
// begins in it after the next start belongs to the new timeline, as any operation that overlaps
// a start may.
struct Registry {
  std::mutex mutex;
  std::deque<std::string> groups;
  std::vector<std::unique_ptr<OperationRing>> timelines;  // every ring made, never freed
  uint64_t activeFirstTicket = 0;  // begun() of the active ring when its timeline started
};

// A ring of `capacity` (rounded as OperationRing rounds it) that no timeline uses; made if none.
OperationRing& idleRing(Registry& r, size_t capacity) {
  const size_t rounded = capacity > 0 ? std::bit_ceil(capacity) : 0;
  for (const auto& ring : r.timelines) {
    if (ring->capacity() == rounded)
      return *ring;
  }
  return *r.timelines.emplace_back(std::make_unique<OperationRing>(capacity));
}

Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

std::atomic<OperationRing*> activeTimeline{nullptr};
std::atomic<int> worldRank{-1};
std::atomic<int64_t> offsetNs{0};

}  // namespace

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
  }
  return ticket;
}

void noteAllArrived(const Ticket* ticket, bool waited) noexcept {
  if (ticket == nullptr || ticket->timeline == nullptr)
    return;
  if (waited)
    ticket->timeline->noteArrived(ticket->timelineTicket, timelineNow());
  else
    ticket->timeline->noteArrivedAtStart(ticket->timelineTicket);
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
  OperationRing& ring = idleRing(r, capacity);  // no timeline is active: every ring is idle
  r.activeFirstTicket = ring.begun();
  startTimelineClock();
  activeTimeline.store(&ring, std::memory_order_release);
  return true;
}

std::vector<Record> stopTimeline(uint64_t& dropped) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  OperationRing* ring = activeTimeline.exchange(nullptr);
  dropped = 0;
  if (ring == nullptr)
    return {};
  const uint64_t begun = ring->begun() - r.activeFirstTicket;
  dropped = begun > ring->capacity() ? begun - ring->capacity() : 0;
  std::vector<Record> records = ring->snapshot(r.activeFirstTicket);
  const std::vector<ClockAnchor> anchors = stopTimelineClock();
  for (Record& record : records) {
    record.ticket -= r.activeFirstTicket;  // 1, 2, ... in each timeline
    if (anchors.empty())
      continue;
    for (int64_t* time : {&record.startNs, &record.endNs, &record.arrivedNs})
      *time = ticksToNs(*time, anchors);
  }
  return records;
}

bool timelineActive() noexcept { return activeTimeline.load(std::memory_order_relaxed) != nullptr; }

}  // namespace chorus::trace
