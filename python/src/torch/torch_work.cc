#include "torch_work.h"

#include <ATen/core/jit_type.h>

#include <string>
#include <utility>

#include "torch_tensors.h"

namespace chorus::torch_backend {

ChorusWork::ChorusWork(int rank,
                       c10d::OpType type,
                       std::vector<std::shared_ptr<chorus::Work>> works,
                       std::vector<at::Tensor> outputs,
                       std::vector<at::Tensor> keepAlive,
                       std::function<void()> after,
                       std::weak_ptr<FutureCompleter> completer,
                       int sourceRank)
    : c10d::Work(rank, type),
      works_(std::move(works)),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      after_(std::move(after)),
      completer_(std::move(completer)),
      sourceRank_(sourceRank) {}

ChorusWork::~ChorusWork() = default;

void ChorusWork::complete() noexcept {
  std::call_once(completed_, [this] {
    std::exception_ptr error;
    for (const auto& work : works_) {
      if (!error)
        error = work->exception();
    }
    if (!error && after_) {
      try {
        after_();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {  // torch's error type, with chorus's message
      try {
        std::rethrow_exception(error);
      } catch (...) {
        try {
          rethrowAsTorchError();
        } catch (...) {
          error = std::current_exception();
        }
      }
    }
    keepAlive_.clear();
    finish(error);  // c10d::Work: completed, isSuccess(), exception()
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(futureMutex_);
      done_ = true;
      future = future_;
    }
    if (future) {
      if (error)
        future->setError(error);
      else
        future->markCompleted(c10::IValue(outputs_));
    }
  });
}

void ChorusWork::settle() noexcept {
  for (const auto& work : works_) {
    try {
      work->wait();
    } catch (...) {
      // recorded by the work itself: complete() reads it from exception()
    }
  }
  complete();
}

bool ChorusWork::isCompleted() {
  for (const auto& work : works_) {
    if (!work->isCompleted())
      return false;
  }
  complete();
  return true;
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    settle();
  } else {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& work : works_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      bool done = false;
      try {
        done = work->waitFor(std::max(left, std::chrono::milliseconds(0)));
      } catch (...) {
        done = true;  // failed: complete() raises it below
      }
      if (!done)
        throwTorchError("chorus: " + work->description() + " did not complete within " +
                        std::to_string(timeout.count()) + " ms (it goes on)");
    }
    complete();
  }
  if (exception())
    std::rethrow_exception(exception());
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> ChorusWork::getFuture() {
  std::unique_lock lock(futureMutex_);
  if (future_)
    return future_;
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto future = future_;
  if (done_) {
    lock.unlock();
    if (exception())
      future->setError(exception());
    else
      future->markCompleted(c10::IValue(outputs_));
    return future;
  }
  lock.unlock();
  if (auto completer = completer_.lock())
    completer->add(c10::intrusive_ptr<ChorusWork>::reclaim_copy(this));
  else
    settle();  // the process group is gone, and its completer with it
  return future;
}

int ChorusWork::sourceRank() const {
  if (sourceRank_ == kSourceOfChorusWork) {
    const int sender = works_.front()->sourceRank();
    TORCH_CHECK(sender >= 0,
                "chorus: the sender of a recv from any source is known once it has completed "
                "successfully (wait() first; a failed recv has none)");
    return sender;
  }
  TORCH_CHECK(sourceRank_ >= 0, "chorus: sourceRank() is defined for recv only");
  return sourceRank_;
}

FutureCompleter::~FutureCompleter() {
  std::thread thread;
  {
    std::lock_guard lock(queue_->mutex);
    queue_->stopping = true;
    thread = std::move(thread_);
  }
  queue_->wake.notify_all();
  if (!thread.joinable())
    return;
  if (thread.get_id() == std::this_thread::get_id())
    thread.detach();  // the last owner let go from a future's callback: the loop ends by itself
  else
    thread.join();
}

void FutureCompleter::add(c10::intrusive_ptr<ChorusWork> work) {
  {
    std::lock_guard lock(queue_->mutex);
    queue_->pending.push_back(std::move(work));
    if (!thread_.joinable())
      thread_ = std::thread([queue = queue_] { loop(queue); });
  }
  queue_->wake.notify_one();
}

void FutureCompleter::loop(const std::shared_ptr<Queue>& queue) {
  std::unique_lock lock(queue->mutex);
  while (true) {
    queue->wake.wait(lock, [&] { return queue->stopping || !queue->pending.empty(); });
    if (queue->pending.empty())
      return;  // stopping, and nothing left to settle
    auto work = std::move(queue->pending.front());
    queue->pending.pop_front();
    lock.unlock();
    work->settle();
    work.reset();
    lock.lock();
  }
}

}  // namespace chorus::torch_backend
