#include "runtime/communicator_state.h"

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::detail {
namespace {

// A Work whose waiter runs the operation itself when it is next in line (see OperationQueue).
class QueuedWork : public Work {
 public:
  QueuedWork(std::string description, std::weak_ptr<CommunicatorState> state)
      : Work(std::move(description)), state_(std::move(state)) {}
  void setOperation(const OperationQueue::Operation& operation) { operation_ = operation; }

 protected:
  void runIfNext() noexcept override {
    if (isCompleted())
      return;
    auto state = state_.lock();  // keeps the communicator alive while its operation runs here
    auto operation = operation_.lock();
    if (state && operation)
      state->queue().runIfNext(operation);
  }

 private:
  std::weak_ptr<CommunicatorState> state_;
  // Weak: the operation holds the Work, and is dropped once it has run.
  std::weak_ptr<std::function<void()>> operation_;
};

}  // namespace

CommunicatorState::CommunicatorState(CommunicatorInfo info,
                                     CommunicatorResources resources,
                                     std::unique_ptr<backend::Backend> backend,
                                     std::chrono::milliseconds timeout)
    : info_(std::move(info)),
      resources_(std::move(resources)),
      backend_(std::move(backend)),
      timeout_(timeout) {}

CommunicatorState::~CommunicatorState() {
  // Pending operations finish first, then peers are told goodbye.
  queue_.shutdown();
  backend_->close();
}

std::shared_ptr<Work> CommunicatorState::submit(transport::Fingerprint fingerprint, Body body) {
  std::lock_guard lock(mutex_);
  if (fingerprint.collective != transport::Collective::kPointToPoint) {
    fingerprint.sequence = ++collectiveSequence_;
  }
  auto work = std::make_shared<QueuedWork>(
      concat("rank ", info_.rank, ": ", fingerprint.describe()), weak_from_this());
  auto operation = std::make_shared<std::function<void()>>(
      [this, work, fingerprint, body = std::move(body)] { execute(*work, fingerprint, body); });
  work->setOperation(operation);
  queue_.push(std::move(operation));
  return work;
}

void CommunicatorState::execute(Work& work,
                                const transport::Fingerprint& fingerprint,
                                const Body& body) {
  std::exception_ptr earlier;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(mutex_);
    earlier = failure_;
    timeout = timeout_;
  }
  if (earlier) {
    work.finish(earlier);
    return;
  }
  try {
    body(backend::CallContext{fingerprint, Deadline::after(timeout)});
    work.finish();
  } catch (...) {
    auto error = std::current_exception();
    {
      std::lock_guard lock(mutex_);
      if (!failure_)
        failure_ = error;
    }
    work.finish(error);
  }
}

void CommunicatorState::setTimeout(std::chrono::milliseconds timeout) {
  CHORUS_CHECK_ARG(timeout.count() > 0, "timeout must be positive, got ", timeout.count(), " ms");
  std::lock_guard lock(mutex_);
  timeout_ = timeout;
}

std::chrono::milliseconds CommunicatorState::timeout() const {
  std::lock_guard lock(mutex_);
  return timeout_;
}

void CommunicatorState::abort() noexcept {
  std::exception_ptr reason;
  try {
    throw PeerError(concat("rank ", info_.rank, " (this process): the communicator was aborted by ",
                           "the program (Communicator::abort)"),
                    info_.rank);
  } catch (...) {
    reason = std::current_exception();
  }
  {
    std::lock_guard lock(mutex_);
    if (!failure_)
      failure_ = reason;
  }
  backend_->abort(reason);
}

uint64_t CommunicatorState::nextSplitId() {
  std::lock_guard lock(mutex_);
  return ++splitCount_;
}

}  // namespace chorus::detail
