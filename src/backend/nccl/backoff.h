// Backoff: the pause between two questions to NCCL or CUDA about work that only they can say is
// done (ncclCommGetAsyncError, cudaEventQuery); neither offers a wait that a deadline or an abort
// can end. The first pauses yield the core, then sleeps double from 8 us up to `longest`.
// Not thread-safe: one per waiting loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace chorus::backend::nccl {

class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds longest) : longest_(longest) {}

  void pause() {
    if (next_.count() < 8)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(next_);
    next_ = std::min(next_ * 2, longest_);
  }

 private:
  std::chrono::microseconds next_{1};
  const std::chrono::microseconds longest_;
};

}  // namespace chorus::backend::nccl
