#include "chorus/work.h"

#include <algorithm>

#include "core/check.h"
#include "core/shared_memory.h"

namespace chorus {

Work::Work(std::string description) : description_(std::move(description)) {}

Work::~Work() = default;

void Work::wait(std::chrono::milliseconds timeout) {
  if (!waitFor(timeout)) {
    throw TimeoutError(detail::concat(description(), " did not complete within ", timeout.count(),
                                      " ms; it is still running and can be waited for again"));
  }
}

bool Work::waitFor(std::chrono::milliseconds timeout) {
  beforeWait();
  if (completed_.load(std::memory_order_acquire) == 0) {
    // not done yet (a blocking call that ran here is: no clock read for a deadline then)
    const bool unbounded = timeout < std::chrono::milliseconds::zero();
    if (unbounded)
      runIfNext();
    if (!awaitCompletion(unbounded, timeout))
      return false;
  }
  if (error_)
    std::rethrow_exception(error_);
  return true;
}

bool Work::awaitCompletion(bool unbounded, std::chrono::milliseconds timeout) {
  constexpr std::chrono::microseconds kSlice = std::chrono::hours(1);  // unbounded: no wake lost
  const auto deadline = unbounded ? std::chrono::steady_clock::time_point::max()
                                  : std::chrono::steady_clock::now() + timeout;
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool done = true;
  while (completed_.load(std::memory_order_seq_cst) == 0) {
    auto slice = kSlice;
    if (!unbounded) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        done = false;
        break;
      }
      slice = std::min(slice, left);
    }
    detail::futexWait(completed_, 0, slice);
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  return done;
}

bool Work::isCompleted() const { return completed_.load(std::memory_order_acquire) != 0; }

void Work::synchronize() { wait(); }

bool Work::buffersInUse() const { return !isCompleted(); }

std::exception_ptr Work::exception() const {
  return completed_.load(std::memory_order_acquire) != 0 ? error_ : nullptr;
}

void Work::finish(std::exception_ptr error) noexcept {
  if (finishing_.exchange(true, std::memory_order_acq_rel))
    return;
  error_ = std::move(error);
  completed_.store(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) > 0)
    detail::futexWakeAll(completed_);
}

}  // namespace chorus
