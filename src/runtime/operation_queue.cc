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

void OperationQueue::push(std::function<void()> operation) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(operation));
    if (!worker_.joinable())
      worker_ = std::thread([this] { workerLoop(); });
  }
  wake_.notify_one();
}

void OperationQueue::workerLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty())
      return;  // stopping, and everything queued has run
    auto operation = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    operation();
    lock.lock();
  }
}

}  // namespace chorus::detail
