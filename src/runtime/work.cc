#include "chorus/work.h"

#include "core/check.h"

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
  const bool unbounded = timeout < std::chrono::milliseconds::zero();
  beforeWait();
  if (unbounded)
    runIfNext();
  std::unique_lock lock(mutex_);
  if (!completed_) {  // done already (a blocking call that ran here): no clock read for a deadline
    if (unbounded)
      done_.wait(lock, [&] { return completed_; });
    else if (!done_.wait_for(lock, timeout, [&] { return completed_; }))
      return false;
  }
  if (error_)
    std::rethrow_exception(error_);
  return true;
}

bool Work::isCompleted() const {
  std::lock_guard lock(mutex_);
  return completed_;
}

void Work::synchronize() { wait(); }

std::exception_ptr Work::exception() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Work::finish(std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (completed_)
      return;
    completed_ = true;
    error_ = std::move(error);
  }
  done_.notify_all();
}

}  // namespace chorus
