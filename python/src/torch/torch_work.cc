#include "torch_work.h"

#include <ATen/core/jit_type.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "torch_streams.h"
#include "torch_tensors.h"

namespace chorus::torch_backend {

TensorLifetimes::~TensorLifetimes() {
  // The GPU finishes what it was given, or stops it once its communicator is aborted (a failed
  // operation's kernel exits when it sees the abort); the copy-outs (`mark`) run after. A host
  // operation still running now (a dropped recv no sender matches, say) is not waited for.
  const auto giveUp = std::chrono::steady_clock::now() + kStopGrace;
  for (Held& held : held_) {
    while (held.onDevice && !finished(held) && std::chrono::steady_clock::now() < giveUp)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (!finished(held)) {  // still in use: its memory is kept rather than reused
      static auto* neverFreed = new std::vector<at::Tensor>();
      static std::mutex neverFreedMutex;
      std::lock_guard lock(neverFreedMutex);
      neverFreed->insert(neverFreed->end(), held.tensors.begin(), held.tensors.end());
    }
  }
}

bool TensorLifetimes::finished(const Held& held) {
  if (held.mark != nullptr && !held.mark->reached())
    return false;
  // A failed work is complete at once, but its memory is in use until the GPU has stopped it.
  return std::none_of(held.works.begin(), held.works.end(),
                      [](const auto& work) { return work->buffersInUse(); });
}

void TensorLifetimes::hold(std::vector<std::shared_ptr<chorus::Work>> works,
                           std::vector<at::Tensor> tensors,
                           std::shared_ptr<StreamMark> mark,
                           bool onDevice) {
  if (tensors.empty())
    return;
  std::lock_guard lock(mutex_);
  held_.push_back({std::move(works), std::move(tensors), std::move(mark), onDevice});
}

void TensorLifetimes::release() {
  std::deque<Held> done;  // destroyed outside the lock (freeing tensors takes torch's locks)
  {
    std::lock_guard lock(mutex_);
    if (held_.empty())
      return;
    // Any that is finished, not only from the front: sends and receives complete out of order.
    std::deque<Held> running;
    for (Held& held : held_) (finished(held) ? done : running).push_back(std::move(held));
    held_.swap(running);
  }
}

ChorusWork::ChorusWork(int rank,
                       c10d::OpType type,
                       std::vector<std::shared_ptr<chorus::Work>> works,
                       std::vector<at::Tensor> outputs,
                       std::vector<at::Tensor> keepAlive,
                       std::function<void()> after,
                       std::weak_ptr<FutureCompleter> completer,
                       std::shared_ptr<TensorLifetimes> lifetimes,
                       int sourceRank,
                       std::shared_ptr<StreamMark> copied)
    : c10d::Work(rank, type),
      works_(std::move(works)),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      after_(std::move(after)),
      completer_(std::move(completer)),
      lifetimes_(std::move(lifetimes)),
      copied_(std::move(copied)),
      device_(firstCudaDevice({&outputs_, &keepAlive_})),
      sourceRank_(sourceRank) {}

// A work dropped before it completed hands its CUDA tensors on (the GPU may be using them).
ChorusWork::~ChorusWork() {
  bool done = false;
  {
    std::lock_guard lock(futureMutex_);
    done = done_;
  }
  if (!done && device_ < 0 && lifetimes_ != nullptr) {
    // Dropped while its operations may still run: they write the outputs too. (The after_ step,
    // which would copy a temporary result out, never runs: nobody can read its result.)
    keepAlive_.insert(keepAlive_.end(), outputs_.begin(), outputs_.end());
    lifetimes_->hold(works_, std::move(keepAlive_), nullptr, /*onDevice=*/false);
  }
  releaseTensors();
}

void ChorusWork::releaseTensors() noexcept {
  if (device_ >= 0 && lifetimes_ != nullptr && !keepAlive_.empty()) {
    // The copy-out writes the outputs on its stream: they are held too until it is done.
    if (copied_ != nullptr)
      keepAlive_.insert(keepAlive_.end(), outputs_.begin(), outputs_.end());
    // (A CUDA work has no after_: its copy-out was queued at issue, ProcessGroupChorus::finish.)
    lifetimes_->hold(works_, std::move(keepAlive_), copied_, /*onDevice=*/true);
  }
  keepAlive_.clear();
}

void ChorusWork::orderCurrentStream() noexcept {
  try {
    const TorchStreamScope stream(device_);
    for (const auto& work : works_) {
      try {
        work->wait();
      } catch (...) {
        // recorded by the work itself: complete() reads it from exception()
      }
    }
  } catch (...) {  // torch's stream could not be read: the device failed, the waits report it
  }
  if (copied_ != nullptr)
    copied_->orderCurrentStream();
}

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
    releaseTensors();
    finish(error);  // c10d::Work: completed, isSuccess(), exception()
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(futureMutex_);
      done_ = true;
      future = future_;
    }
    if (future)
      completeFuture(*future, error);
  });
}

void ChorusWork::completeFuture(c10::ivalue::Future& future, std::exception_ptr error) noexcept {
  // markCompleted may throw after marking the future complete (recording its CUDA events, or a
  // callback): then the error can only be given where it is still open. A callback that throws
  // in setError has nowhere to go either.
  try {
    if (!error) {
      future.markCompleted(c10::IValue(outputs_));  // a CUDA future records its events here
      return;
    }
  } catch (...) {
    error = std::current_exception();
  }
  try {
    future.setErrorIfNeeded(error);
  } catch (...) {
  }
}

void ChorusWork::settleOnHelperThread() noexcept {
  try {
    // Not on the device's default stream, which the program computes on: a wait there would
    // hold the program's work up until this operation ended.
    const TorchSideStream side(device_);
    settle();
  } catch (...) {  // no pool stream: settle where we are
    settle();
  }
}

void ChorusWork::settle() noexcept {
  // On CUDA tensors a wait orders this thread's current stream (torch's) after the operation.
  orderCurrentStream();
  complete();
}

bool ChorusWork::isCompleted() {
  for (const auto& work : works_) {
    if (!work->isCompleted())
      return false;
  }
  if (copied_ != nullptr && !copied_->reached())
    return false;  // the copy-out is still running
  complete();
  return true;
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  const TorchStreamScope stream(device_);
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
    if (copied_ != nullptr)
      copied_->orderCurrentStream();
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
  std::vector<c10::Device> devices;  // a CUDA future records and waits on events of its device
  if (device_ >= 0)
    devices.emplace_back(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_));
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                     std::move(devices));
  auto future = future_;
  if (done_) {
    lock.unlock();
    orderCurrentStream();  // the future's events go on the caller's stream: order it first
    completeFuture(*future, exception());
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
    work->settleOnHelperThread();
    work.reset();
    lock.lock();
  }
}

}  // namespace chorus::torch_backend
