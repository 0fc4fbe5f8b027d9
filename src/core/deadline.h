// Deadline: the point in time after which a blocking call gives up with TimeoutError.
// Every blocking call in chorus takes one.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>

namespace chorus {

using Clock = std::chrono::steady_clock;

// Clock::now() to within a few milliseconds (CLOCK_MONOTONIC_COARSE, the clock steady_clock reads,
// at the kernel's tick): a fraction of the cost of a precise read, which in a VM is a good part of
// a small collective. For the start of an operation, whose deadline and stall warnings are seconds
// away; never for timing.
inline Clock::time_point coarseNow() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return Clock::time_point(std::chrono::seconds(now.tv_sec) +
                           std::chrono::nanoseconds(now.tv_nsec));
}

class Deadline {
 public:
  static Deadline after(std::chrono::milliseconds timeout) {
    return Deadline(Clock::now() + timeout);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  bool isNever() const { return at_ == Clock::time_point::max(); }
  // Time left, never negative.
  std::chrono::milliseconds remaining() const {
    if (isNever())
      return std::chrono::milliseconds::max();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }
  // The time left in whole milliseconds for poll/epoll_wait, rounded up (a wait of less than one
  // sleeps one instead of spinning) and clamped to an int; -1 for never.
  int pollTimeoutMs() const {
    if (isNever())
      return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
  }
  // The earlier of two deadlines.
  static Deadline earliest(Deadline a, Deadline b) { return a.at_ <= b.at_ ? a : b; }

 private:
  Clock::time_point at_;
};

}  // namespace chorus
