// coarseNow (core/deadline.h) reads the clock Clock::now() reads, to within its tick: an
// operation's deadline made from it is the one a precise read would make, give or take
// milliseconds (a realtime or boot-time clock would be off by years or by the time suspended).
#include "core/deadline.h"

#include <gtest/gtest.h>

#include <chrono>

namespace chorus {
namespace {

using namespace std::chrono_literals;

TEST(DeadlineTest, CoarseNowIsTheSteadyClockWithinATick) {
  for (int i = 0; i < 100; ++i) {
    const Clock::time_point before = Clock::now();
    const Clock::time_point coarse = coarseNow();
    const Clock::time_point after = Clock::now();
    // The coarse clock lags by up to one tick (1-10 ms) and never runs ahead of a later read.
    EXPECT_LE(coarse, after);
    EXPECT_GE(coarse, before - 50ms);
  }
}

}  // namespace
}  // namespace chorus
