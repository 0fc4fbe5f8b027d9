// The recorder's timeline times (Note [Timeline ticks]): whatever clock the timeline records by
// (TSC ticks where the kernel keeps time by the TSC), the records it returns hold CLOCK_MONOTONIC
// nanoseconds: each time lies between readings of that clock taken around it, and a span that
// slept at least 20 ms lasts at least that long.
#include "trace/recorder.h"

#include <gtest/gtest.h>

#include <chrono>
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

}  // namespace
}  // namespace chorus::trace
