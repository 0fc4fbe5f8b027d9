// The Work of a collective on CUDA tensors: see device_work.h.
#include "runtime/device_work.h"

#include "chorus/stream.h"
#include "core/check.h"
#include "runtime/device_watchdog.h"

namespace chorus::detail {

DeviceWork::DeviceWork(int worldRank,
                       const Fingerprint& fingerprint,
                       std::shared_ptr<backend::DeviceCompletion> completion,
                       std::exception_ptr error,
                       std::shared_ptr<Work> check,
                       std::shared_ptr<store::Store> jobStore)
    : worldRank_(worldRank),
      fingerprint_(fingerprint),
      completion_(std::move(completion)),
      failedAtCall_(error != nullptr),
      check_(std::move(check)),
      jobStore_(std::move(jobStore)) {
  if (error || completion_ == nullptr)
    finish(error);
}

std::exception_ptr DeviceWork::checkFailure() const {
  return check_ != nullptr && check_->isCompleted() ? check_->exception() : nullptr;
}

void DeviceWork::beforeWait() noexcept {
  // Every wait orders the waiting thread's current stream, also after an earlier wait completed
  // the Work (torch's Work.wait() does the same): a second stream that waits must be ordered too.
  // A Work completes once: a check that fails after an earlier wait completed it is reported by
  // the communicator's next call, not by this Work, but the stream is still ordered.
  if (completion_ == nullptr || exception() != nullptr)
    return;
  std::exception_ptr failed = checkFailure();
  try {
    completion_->orderBefore(currentStream());
  } catch (...) {
    if (!failed)
      failed = std::current_exception();
  }
  finish(failed);  // a no-op once complete
}

bool DeviceWork::isCompleted() const {
  if (completion_ == nullptr || exception() != nullptr)
    return true;
  if (std::exception_ptr failed = checkFailure()) {
    const_cast<DeviceWork*>(this)->finish(failed);
    return true;
  }
  try {
    return completion_->isCompleted() && (check_ == nullptr || check_->isCompleted());
  } catch (...) {
    // The collective failed: the Work is complete, with the error (finish is idempotent).
    const_cast<DeviceWork*>(this)->finish(std::current_exception());
    return true;
  }
}

bool DeviceWork::buffersInUse() const {
  return completion_ != nullptr && !completion_->deviceStopped();
}

void DeviceWork::synchronize(Deadline deadline) {
  if (completion_ != nullptr && !failedAtCall_) {
    try {
      completion_->synchronize(deadline);
      if (check_ != nullptr)
        check_->wait();  // the check keeps its own deadline
    } catch (...) {
      const Deadline grace =
          Deadline::earliest(deadline, Deadline::after(DeviceWatchdog::kRecordGrace));
      std::exception_ptr error = nameFailedRank(std::current_exception(), jobStore_.get(),
                                                worldRank_, fingerprint_, grace);
      finish(error);
      std::rethrow_exception(error);
    }
  }
  wait();  // completes the Work (orders the current stream, a no-op after the host wait)
}

std::string DeviceWork::describe() const {
  return concat("rank ", worldRank_, ": ", fingerprint_.describe(), " on CUDA");
}

}  // namespace chorus::detail
