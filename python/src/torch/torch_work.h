// The chorus torch.distributed backend: the Work torch gets back from every operation.
//
// Contract:
//  - A ChorusWork stands for one or more chorus operations issued together (a coalesced call is
//    several) and keeps every tensor they use alive until it completes.
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

namespace chorus::torch_backend {

class FutureCompleter;

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
             int sourceRank = -1);
  ~ChorusWork() override;

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override;

  // Waits for every chorus operation (their own deadlines bound it), then completes this work.
  // Never throws: a failure is recorded, and raised by wait() and the future.
  void settle() noexcept;

 private:
  // Completes this work once every chorus operation has (the caller has seen that).
  void complete() noexcept;

  std::vector<std::shared_ptr<chorus::Work>> works_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  std::function<void()> after_;
  // Weak: the process group owns the completer, and a work the completer thread drops must not
  // end it there (its destructor joins that thread).
  std::weak_ptr<FutureCompleter> completer_;
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
