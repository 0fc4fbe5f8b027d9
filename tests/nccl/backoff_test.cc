// Backoff (backend/nccl/backoff.h): when the waits between questions to NCCL yield and when they
// sleep. No GPU needed.
#include "backend/nccl/backoff.h"

#include <gtest/gtest.h>

#include <chrono>

namespace chorus::backend::nccl {
namespace {

using std::chrono::microseconds;

TEST(Backoff, YieldsThreeTimesThenSleeps) {
  Backoff backoff(microseconds(16));
  for (int pause = 0; pause < 3; ++pause) backoff.pause();
  EXPECT_EQ(backoff.sleeps(), 0);
  backoff.pause();
  backoff.pause();
  EXPECT_EQ(backoff.sleeps(), 2);
}

TEST(Backoff, NeverSleepsInsideItsSpinWindow) {
  // A launch on a non-blocking communicator is microseconds away: sleeping there cost a call
  // about 100 us (Note [Enqueue on a non-blocking communicator]).
  Backoff backoff(microseconds(1000), std::chrono::hours(1));
  for (int pause = 0; pause < 200; ++pause) backoff.pause();
  EXPECT_EQ(backoff.sleeps(), 0);
}

TEST(Backoff, SleepsOnceItsSpinWindowHasPassed) {
  Backoff backoff(microseconds(16), microseconds(1));
  backoff.pause();  // starts the window
  const auto end = std::chrono::steady_clock::now() + microseconds(50);
  while (std::chrono::steady_clock::now() < end) {
  }
  for (int pause = 0; pause < 3; ++pause) backoff.pause();
  EXPECT_GE(backoff.sleeps(), 1);
}

}  // namespace
}  // namespace chorus::backend::nccl
