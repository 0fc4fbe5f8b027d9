// OperationQueue: runs a communicator's operations one at a time, in the order they were pushed,
// on one worker thread (started on first use). Operations must not throw: they report failure
// through their Work. The destructor calls shutdown().
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/thread_annotations.h"

namespace chorus::detail {

class OperationQueue {
 public:
  OperationQueue() = default;
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  void push(std::function<void()> operation);
  // Runs what is queued, then stops the worker. Idempotent; push() after it is a bug.
  void shutdown();

 private:
  void workerLoop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> pending_ CHORUS_GUARDED_BY(mutex_);
  bool stopping_ CHORUS_GUARDED_BY(mutex_) = false;
  std::thread worker_;
};

}  // namespace chorus::detail
