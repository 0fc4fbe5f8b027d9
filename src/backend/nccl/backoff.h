// Backoff: the pause between two questions to NCCL or CUDA about work that only they can say is
// done (ncclCommGetAsyncError, cudaEventQuery); neither offers a wait that a deadline or an abort
// can end. Pauses yield the core (no sleep) until `spinFor` has passed since the first pause, and
// at least the first three times; then sleeps double from 8 us up to `longest`.
//
// The spin matters where the answer is microseconds away: a non-blocking NCCL communicator of more
// than one rank launches every collective from a thread of its own and answers ncclInProgress
// until that thread is done, tens of microseconds later. Sleeping there (a Linux sleep takes at
// least about 60 us, timer slack included) multiplied a call's cost (Note [Enqueue on a
// non-blocking communicator] in nccl_backend.cc). Not thread-safe: one per waiting loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace chorus::backend::nccl {

class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds longest,
                   std::chrono::microseconds spinFor = std::chrono::microseconds(0))
      : longest_(longest), spinFor_(spinFor) {}

  void pause() {
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {
      started_ = true;
      spinUntil_ = now + spinFor_;
    }
    if (next_.count() < 8 || now < spinUntil_) {
      std::this_thread::yield();
      next_ = std::min(next_ * 2, std::chrono::microseconds(8));
      return;
    }
    std::this_thread::sleep_for(next_);
    ++sleeps_;
    next_ = std::min(next_ * 2, longest_);
  }

  // How many pauses slept (rather than yielded).
  int sleeps() const { return sleeps_; }

 private:
  int sleeps_ = 0;
  std::chrono::microseconds next_{1};
  const std::chrono::microseconds longest_;
  const std::chrono::microseconds spinFor_;
  bool started_ = false;
  std::chrono::steady_clock::time_point spinUntil_;
};

}  // namespace chorus::backend::nccl
