// The recorder's timeline times (Note [Timeline ticks]): whatever clock the timeline records by
// (TSC ticks where the kernel keeps time by the TSC), the records it returns hold CLOCK_MONOTONIC
// nanoseconds: each time lies between readings of that clock taken around it, and a span that
// slept at least 20 ms lasts at least that long.
#include "trace/recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <thread>
#include <vector>

namespace chorus::trace {
namespace {

// A backend that found every peer there at its first look says so without a clock read: the
// record then says they had arrived by its start (a wait of zero in the trace).
TEST(Recorder, ArrivalsSeenAtTheFirstLookAreAtTheStart) {
  ASSERT_TRUE(startTimeline(64));
  const Ticket first = beginOperation(0, Fingerprint{}, 8, /*coarseNowNs=*/monotonicNs());
  noteAllArrived(&first, /*waited=*/false);
  end(first, false);
  const Ticket second = beginOperation(0, Fingerprint{}, 8, /*coarseNowNs=*/monotonicNs());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  noteAllArrived(&second, /*waited=*/true);
  end(second, false);
  uint64_t dropped = 0;
  const std::vector<Record> records = stopTimeline(dropped);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].arrivedNs, records[0].startNs);
  // The 5 ms it waited, less the slack of converting ticks (see the next test).
  EXPECT_GE(records[1].arrivedNs - records[1].startNs, 5000000 - 20000);
}

TEST(Recorder, TimelineTimesAreMonotonicNanoseconds) {
  ASSERT_TRUE(startTimeline(64));
  const int64_t before = monotonicNs();
  const Ticket operation = beginOperation(0, Fingerprint{}, 8, /*coarseNowNs=*/before);
  const int64_t started = monotonicNs();
  noteAllArrived(&operation);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t beforeEnd = monotonicNs();
  end(operation, false);
  const int64_t after = monotonicNs();
  uint64_t dropped = 0;
  const std::vector<Record> records = stopTimeline(dropped);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(dropped, 0u);
  const Record& record = records[0];
  // A few microseconds of slack for the line through two readings of each clock.
  constexpr int64_t kSlackNs = 20000;
  EXPECT_GE(record.startNs, before - kSlackNs);
  EXPECT_LE(record.startNs, started + kSlackNs);
  EXPECT_GE(record.arrivedNs, record.startNs);
  EXPECT_LE(record.arrivedNs, beforeEnd + kSlackNs);
  EXPECT_GE(record.endNs, beforeEnd - kSlackNs);
  EXPECT_LE(record.endNs, after + kSlackNs);
  EXPECT_GE(record.endNs - record.startNs, 20'000'000 - kSlackNs);
  EXPECT_FALSE(record.failed);
}

// Resident memory of this process, from /proc/self/statm (its second field, in pages).
int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0;
  int64_t resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

Ticket beginAt(int64_t detail) {
  return beginOperation(0, Fingerprint{}, 8, /*coarseNowNs=*/monotonicNs(), detail);
}

// Note [Timeline rings are reused]: a ring's slots are written when it is made, so every new
// ring shows in the resident memory. Forty timelines of one capacity keep one ring: before, each
// start made a ring of its own, and a process that traced one window per epoch grew by 23 MB an
// epoch at the default capacity.
TEST(Recorder, TimelinesStartedAgainAndAgainKeepOneRingPerCapacity) {
  constexpr size_t kCapacity = size_t{1} << 16;
  const int64_t beforeProbe = residentBytes();
  const OperationRing probe(kCapacity);  // what one ring costs
  const int64_t ringBytes = residentBytes() - beforeProbe;
  ASSERT_GT(ringBytes, int64_t{1} << 20) << "a ring's memory does not show in the measure";
  uint64_t dropped = 0;
  ASSERT_TRUE(startTimeline(kCapacity));
  stopTimeline(dropped);
  const int64_t before = residentBytes();
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(startTimeline(kCapacity));
    end(beginAt(i), false);
    const std::vector<Record> records = stopTimeline(dropped);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].detail, i);
  }
  EXPECT_LT(residentBytes() - before, ringBytes) << "the 40 timelines grew the process by more "
                                                    "than one ring";
}

// A reused ring's timeline holds its own operations only, numbered from 1: not the earlier
// timelines', and not a late end of one of them (which finds its record, or a newer ticket in
// its slot once the ring has wrapped, and leaves the new records alone).
TEST(Recorder, AReusedRingsTimelineHoldsOnlyItsOwnOperations) {
  uint64_t dropped = 0;
  ASSERT_TRUE(startTimeline(4));
  const Ticket late = beginAt(100);  // ends only after the next timeline has started
  end(beginAt(101), false);
  const Ticket lateToo = beginAt(102);  // ends in the third timeline
  ASSERT_EQ(stopTimeline(dropped).size(), 3u);

  ASSERT_TRUE(startTimeline(4));
  end(beginAt(0), false);
  end(late, false);  // its record is still in the ring, outside this timeline
  std::vector<Record> records = stopTimeline(dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].detail, 0);
  EXPECT_EQ(records[0].ticket, 1u);
  EXPECT_FALSE(records[0].running());

  ASSERT_TRUE(startTimeline(4));
  std::vector<Ticket> running;
  for (int i = 1; i <= 5; ++i) running.push_back(beginAt(i));  // wraps over `lateToo`'s slot
  end(lateToo, false);
  records = stopTimeline(dropped);
  EXPECT_EQ(dropped, 1u);  // five begun into four slots
  ASSERT_EQ(records.size(), 4u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].detail, static_cast<int64_t>(i + 2));
    EXPECT_EQ(records[i].ticket, i + 2);
    EXPECT_TRUE(records[i].running()) << "record " << i << " was ended by another's end";
  }
  for (const Ticket& ticket : running) end(ticket, false);
}

}  // namespace
}  // namespace chorus::trace
