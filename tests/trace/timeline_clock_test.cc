// The timeline's clock (Note [Timeline ticks]): ticks become nanoseconds on the line through the
// anchors either side of them, the TSC is trusted only where readings on every CPU agree, and a
// long timeline takes anchors as it goes. Expected values are worked out by hand from the lines.
#include "trace/timeline_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace chorus::trace {
namespace {

// Two segments of different slopes: 2 ticks per ns until tick 2000, then 1 tick per ns.
const std::vector<ClockAnchor> kBentLine = {
    {1000, 10'000, 0}, {3000, 11'000, 0}, {4000, 12'000, 0}};

TEST(TimelineClock, TicksFollowTheSegmentAroundThem) {
  EXPECT_EQ(ticksToNs(2000, kBentLine), 10'500);
  EXPECT_EQ(ticksToNs(3500, kBentLine), 11'500);  // one straight line would say 11'250
  EXPECT_EQ(ticksToNs(3000, kBentLine), 11'000);
  EXPECT_EQ(ticksToNs(4000, kBentLine), 12'000);
}

TEST(TimelineClock, TicksOutsideTheAnchorsFollowTheNearestSegment) {
  EXPECT_EQ(ticksToNs(800, kBentLine), 9'900);
  EXPECT_EQ(ticksToNs(4500, kBentLine), 12'500);
}

TEST(TimelineClock, NoTimeAndTooFewAnchorsLeaveTheValue) {
  EXPECT_EQ(ticksToNs(0, kBentLine), 0);  // Record: not ended
  EXPECT_EQ(ticksToNs(1, kBentLine), 1);  // Record: ended at a time not recorded
  EXPECT_EQ(ticksToNs(5000, {{1000, 10'000, 0}}), 5000);
  EXPECT_EQ(ticksToNs(5000, {{1000, 10'000, 0}, {1000, 10'500, 1}}), 5000);
}

TEST(TimelineClock, RepeatedTicksStillFindADistinctSegment) {
  const std::vector<ClockAnchor> anchors = {
      {1000, 10'000, 0}, {1000, 10'000, 1}, {3000, 11'000, 0}};
  EXPECT_EQ(ticksToNs(1000, anchors), 10'000);
  EXPECT_EQ(ticksToNs(2000, anchors), 10'500);
}

// Readings twice round two CPUs, 2 ticks per ns, 1 us apart; `lag` ticks subtracted on CPU 1.
std::vector<ClockAnchor> twoCpus(int64_t lag) {
  std::vector<ClockAnchor> readings;
  for (int i = 0; i < 4; ++i) {
    const int cpu = i % 2;
    const int64_t ns = 1'000'000 + 1000 * i;
    readings.push_back({2 * ns - (cpu == 1 ? lag : 0), ns, cpu});
  }
  return readings;
}

TEST(TimelineClock, CpusWhoseCountersAgreePass) {
  EXPECT_TRUE(tscReadingsAgree(twoCpus(0), kTscAgreementNs));
  EXPECT_TRUE(tscReadingsAgree(twoCpus(200), kTscAgreementNs));  // 100 ns off: within tolerance
}

TEST(TimelineClock, ACpuWhoseCounterIsOffsetFails) {
  EXPECT_FALSE(tscReadingsAgree(twoCpus(-10'000), kTscAgreementNs));  // 5 us ahead
  EXPECT_FALSE(tscReadingsAgree(twoCpus(1'000), kTscAgreementNs));    // 500 ns behind
  // 100 ns apart, CPU 1 150 ns behind: within the tolerance, yet read later with a smaller count.
  const std::vector<ClockAnchor> behind = {
      {2000, 1000, 0}, {2200 - 300, 1100, 1}, {2400, 1200, 0}, {2600 - 300, 1300, 1}};
  EXPECT_FALSE(tscReadingsAgree(behind, kTscAgreementNs));
}

TEST(TimelineClock, ACounterThatStandsStillOrHasNoSecondReadingFails) {
  std::vector<ClockAnchor> still = twoCpus(0);
  for (ClockAnchor& reading : still) reading.ticks = 5;
  EXPECT_FALSE(tscReadingsAgree(still, kTscAgreementNs));
  EXPECT_FALSE(tscReadingsAgree({{100, 50, 0}, {300, 150, 1}}, kTscAgreementNs));
  EXPECT_FALSE(tscReadingsAgree({}, kTscAgreementNs));
}

// A timeline longer than a few anchor intervals takes anchors along the way, and each reading of
// the clock converts to a time between CLOCK_MONOTONIC readings taken around it.
TEST(TimelineClock, ALongTimelineTakesAnchorsAsItGoes) {
  startTimelineClock();
  if (!timelineClockIsTsc()) {
    stopTimelineClock();
    GTEST_SKIP() << "the timeline records nanoseconds here (no trusted TSC): no anchors";
  }
  struct Bracket {
    int64_t before, ticks, after;
  };
  std::vector<Bracket> brackets;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
  while (std::chrono::steady_clock::now() < until) {
    Bracket bracket;
    bracket.before = monotonicNs();
    bracket.ticks = timelineNow();
    bracket.after = monotonicNs();
    brackets.push_back(bracket);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::vector<ClockAnchor> anchors = stopTimelineClock();
  // 150 ms is at least 4 intervals of 2^26 ticks below 1.8 GHz: start, >= 1 between, stop.
  EXPECT_GE(anchors.size(), 3u);
  for (size_t i = 1; i < anchors.size(); ++i) EXPECT_GT(anchors[i].ns, anchors[i - 1].ns);
  constexpr int64_t kSlackNs = 2000;
  for (const Bracket& bracket : brackets) {
    EXPECT_GE(ticksToNs(bracket.ticks, anchors), bracket.before - kSlackNs);
    EXPECT_LE(ticksToNs(bracket.ticks, anchors), bracket.after + kSlackNs);
  }
}

}  // namespace
}  // namespace chorus::trace
