#include "runtime/operation_queue.h"

namespace chorus::detail {

OperationQueue::~OperationQueue() { shutdown(); }

void OperationQueue::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable())
    worker_.join();
}

void OperationQueue::push(Operation operation, bool pointToPoint) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(Entry{std::move(operation), pointToPoint});
    state_.fetch_add(kPendingOne, std::memory_order_acq_rel);
    if (!worker_.joinable())
      worker_ = std::thread([this] { workerLoop(); });
  }
  wake_.notify_one();
}

bool OperationQueue::claimIfIdle() {
  uint64_t idle = 0;
  return state_.compare_exchange_strong(idle, kRunning, std::memory_order_acq_rel,
                                        std::memory_order_relaxed);
}

OperationQueue::Operation OperationQueue::takeHead() {
  Operation operation = std::move(pending_.front().operation);
  pending_.pop_front();
  state_.fetch_add(kRunning - kPendingOne, std::memory_order_acq_rel);
  return operation;
}

bool OperationQueue::runIfNext(const Operation& operation) {
  {
    std::lock_guard lock(mutex_);
    if (runningNow() || pending_.empty() || pending_.front().operation != operation ||
        pending_.front().pointToPoint) {
      return false;
    }
    takeHead();
  }
  run(operation);
  return true;
}

OperationQueue::Operation OperationQueue::takeNextPointToPoint() {
  std::lock_guard lock(mutex_);
  if (pending_.empty() || !pending_.front().pointToPoint)
    return nullptr;
  Operation next = std::move(pending_.front().operation);
  pending_.pop_front();
  state_.fetch_sub(kPendingOne, std::memory_order_acq_rel);
  return next;
}

namespace {
// Whether the operation running on this thread has released the queue (releaseRunning).
thread_local bool releasedByOperation = false;
}  // namespace

void OperationQueue::run(const Operation& operation) {
  releasedByOperation = false;
  (*operation)();
  if (!releasedByOperation)
    releaseRunning();
}

void OperationQueue::releaseRunning() {
  releasedByOperation = true;
  releaseClaim();
}

void OperationQueue::releaseClaim() {
  const uint64_t before = state_.fetch_and(~kRunning, std::memory_order_acq_rel);
  // Whatever was queued behind it can start now (on the worker, or on its own waiter). With nothing
  // queued the worker has nothing to do: waking it would only cost a context switch. A push after
  // the fetch_and wakes it itself. The worker tests its condition under mutex_, so taking mutex_
  // here orders this wake after that test (or before it, when the test sees the release).
  if (before >= kPendingOne) {
    { std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }
}

void OperationQueue::workerLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    // Never start while another thread (a waiter that claimed its operation) is running one.
    wake_.wait(lock, [&] { return !runningNow() && (stopping_ || !pending_.empty()); });
    if (pending_.empty())
      return;  // stopping, and everything queued has run
    Operation operation = takeHead();
    lock.unlock();
    run(operation);
    lock.lock();
  }
}

}  // namespace chorus::detail
