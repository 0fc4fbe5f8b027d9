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
    if (!worker_.joinable())
      worker_ = std::thread([this] { workerLoop(); });
  }
  wake_.notify_one();
}

bool OperationQueue::claimIfIdle() {
  std::lock_guard lock(mutex_);
  if (running_ || !pending_.empty())
    return false;
  running_ = true;
  return true;
}

bool OperationQueue::runIfNext(const Operation& operation) {
  {
    std::lock_guard lock(mutex_);
    if (running_ || pending_.empty() || pending_.front().operation != operation ||
        pending_.front().pointToPoint) {
      return false;
    }
    pending_.pop_front();
    running_ = true;
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
  bool queuedBehind;
  {
    std::lock_guard lock(mutex_);
    running_ = false;
    queuedBehind = !pending_.empty();
  }
  // Whatever was queued behind it can start now (on the worker, or on its own waiter). With nothing
  // queued the worker has nothing to do: waking it would only cost a context switch.
  if (queuedBehind)
    wake_.notify_all();
}

void OperationQueue::workerLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    // Never start while another thread (a waiter that claimed its operation) is running one.
    wake_.wait(lock, [&] { return !running_ && (stopping_ || !pending_.empty()); });
    if (pending_.empty())
      return;  // stopping, and everything queued has run
    auto operation = std::move(pending_.front().operation);
    pending_.pop_front();
    running_ = true;
    lock.unlock();
    run(operation);
    lock.lock();
  }
}

}  // namespace chorus::detail
