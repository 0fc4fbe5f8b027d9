// The chorus torch.distributed backend: the Work torch gets back from every operation.
//
// Contract:
//  - A ChorusWork stands for one or more chorus operations issued together (a coalesced call is
//    several) and keeps every tensor they use alive until it completes; dropped before that, it
//    hands them to the process group's TensorLifetimes, which frees them once the operations are
//    done.
//  - It completes once all of them have, and then runs its `after` step exactly once (copying a
//    temporary result into the caller's tensors: the list forms of allgather, gather...), on
//    whichever thread sees the completion first: wait(), isCompleted() or the FutureCompleter.
//  - wait() blocks (no timeout: up to chorus's own deadline for the operation, which names the
//    ranks it waited for) and rethrows a failure as torch's error with chorus's message; with a
//    timeout, it raises torch's error when the time runs out, and the operation goes on.
//  - getFuture() returns a future that completes with result() (the output tensors) or with the
//    failure; DistributedDataParallel's communication hooks wait on it. A FutureCompleter thread
//    completes the futures of works that were still running when their future was asked for (or,
//    once the process group is gone, getFuture() waits for the work itself).
//  - On CUDA tensors, as torch's NCCL backend: wait() orders the caller's current stream after
//    the operations and does not block the host. The future is a CUDA future of the tensors'
//    device (its waiters' streams are ordered after it); the completer orders a side stream of
//    its own, never the default one the program computes on. There is no `after` step: the
//    process group queues a CUDA operation's copies when it issues it, on a side stream
//    (ProcessGroupChorus::finish), and every wait also orders its stream after their `copied`
//    mark. The tensors, outputs included, stay alive until the GPU has finished with them
//    (TensorLifetimes), waited for or not.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "chorus/work.h"
#include "torch_streams.h"

namespace chorus::torch_backend {

class FutureCompleter;

// Keeps the tensors of operations that may still use them alive until they are done: those of
// CUDA operations until the GPU has finished with them (a wait only orders a stream), and those of
// any work dropped unwaited while it runs (torch allows it; DDP's join() does at every forward).
// Freed at once, their memory would go to the next tensor of that size (torch's caching allocator,
// or malloc) while the operation still writes it. Thread-safe.
class TensorLifetimes {
 public:
  TensorLifetimes() = default;
  // Waits, at most kStopGrace in all, until the GPU has finished or stopped what it holds, then
  // lets go; what is still in use after that (host operations are not waited for) is kept to the
  // end of the process, never freed.
  ~TensorLifetimes();
  TensorLifetimes(const TensorLifetimes&) = delete;
  TensorLifetimes& operator=(const TensorLifetimes&) = delete;

  // How long the destructor waits for the GPU to finish or stop what it holds.
  static constexpr std::chrono::seconds kStopGrace{10};

  // Holds `tensors` (none: nothing to do) until none of `works` uses its buffers
  // (Work::buffersInUse: after a failure, until the GPU has stopped it), and the GPU has passed
  // `mark` where there is one. onDevice: CUDA operations' tensors, which the destructor waits for.
  void hold(std::vector<std::shared_ptr<chorus::Work>> works,
            std::vector<at::Tensor> tensors,
            std::shared_ptr<StreamMark> mark,
            bool onDevice);
  // Lets go of everything whose operations are done with it. Cheap when nothing is held.
  void release();

 private:
  struct Held {
    std::vector<std::shared_ptr<chorus::Work>> works;
    std::vector<at::Tensor> tensors;
    std::shared_ptr<StreamMark> mark;
    bool onDevice;
  };
  static bool finished(const Held& held);

  std::mutex mutex_;
  std::deque<Held> held_;  // guarded by mutex_
};

class ChorusWork : public c10d::Work {
 public:
  // A sourceRank for a recv from any source: the sender, which its chorus Work learns.
  static constexpr int kSourceOfChorusWork = -2;

  ChorusWork(int rank,
             c10d::OpType type,
             std::vector<std::shared_ptr<chorus::Work>> works,
             std::vector<at::Tensor> outputs,
             std::vector<at::Tensor> keepAlive,
             std::function<void()> after,
             std::weak_ptr<FutureCompleter> completer,
             std::shared_ptr<TensorLifetimes> lifetimes,
             int sourceRank = -1,
             std::shared_ptr<StreamMark> copied = nullptr);
  ~ChorusWork() override;

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override;

  // Waits for every chorus operation (their own deadlines bound it), then completes this work.
  // Never throws: a failure is recorded, and raised by wait() and the future.
  void settle() noexcept;
  // settle() for the future completer's thread: on CUDA tensors, with a side stream as torch's
  // current one (TorchSideStream), where the future's events go.
  void settleOnHelperThread() noexcept;

 private:
  // Completes this work once every chorus operation has (the caller has seen that).
  void complete() noexcept;
  // Lets go of the tensors: at once for CPU ones of a completed work, through lifetimes_ for CUDA
  // ones and for those of a work dropped while it runs.
  void releaseTensors() noexcept;
  // Completes `future` with the outputs, or with `error` (also if completing it fails).
  void completeFuture(c10::ivalue::Future& future, std::exception_ptr error) noexcept;
  // Orders this thread's current stream after the operations, and after the copy-out's mark.
  void orderCurrentStream() noexcept;

  std::vector<std::shared_ptr<chorus::Work>> works_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  std::function<void()> after_;
  // Weak: the process group owns the completer, and a work the completer thread drops must not
  // end it there (its destructor joins that thread).
  std::weak_ptr<FutureCompleter> completer_;
  std::shared_ptr<TensorLifetimes> lifetimes_;
  std::shared_ptr<StreamMark> copied_;  // after a CUDA operation's copy-out, if it has one
  int device_;                          // the CUDA ordinal of the tensors, -1 for CPU tensors
  int sourceRank_;
  std::once_flag completed_;
  std::mutex futureMutex_;
  bool done_ = false;                               // guarded by futureMutex_
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by futureMutex_
};

// One thread per process group, started on first use: settles, in issue order, the works whose
// future was asked for before they completed.
class FutureCompleter {
 public:
  FutureCompleter() = default;
  ~FutureCompleter();
  FutureCompleter(const FutureCompleter&) = delete;
  FutureCompleter& operator=(const FutureCompleter&) = delete;

  void add(c10::intrusive_ptr<ChorusWork> work);

 private:
  // What the thread uses, shared with it: the thread may outlive this object when its last owner
  // lets go from the thread itself (a future's callback), and then finishes on its own.
  struct Queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<c10::intrusive_ptr<ChorusWork>> pending;
    bool stopping = false;
  };
  static void loop(const std::shared_ptr<Queue>& queue);

  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::thread thread_;  // guarded by queue_->mutex
};

}  // namespace chorus::torch_backend
