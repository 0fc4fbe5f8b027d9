#include "runtime/operation_queue.h"

#include <pthread.h>
#include <sched.h>

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

void OperationQueue::push(Operation operation, bool pointToPoint, bool collective) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(Entry{std::move(operation), pointToPoint, collective, pointToPoint});
    if (pointToPoint)
      pointToPointQueued_.fetch_add(1, std::memory_order_seq_cst);
    state_.fetch_add(kPendingOne, std::memory_order_acq_rel);
    if (!worker_.joinable())
      worker_ = std::thread([this] { workerLoop(); });
  }
  wake_.notify_one();
}

void OperationQueue::pushFront(Operation operation) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_front(Entry{std::move(operation), /*pointToPoint=*/false, /*collective=*/false,
                              /*workerOnly=*/true});
    state_.fetch_add(kPendingOne, std::memory_order_acq_rel);
    if (!worker_.joinable())
      worker_ = std::thread([this] { workerLoop(); });
  }
  wake_.notify_one();
}

OperationQueue::Operation OperationQueue::removeAt(size_t index) {
  const auto entry = pending_.begin() + static_cast<std::ptrdiff_t>(index);
  Operation operation = std::move(entry->operation);
  if (entry->pointToPoint)
    pointToPointQueued_.fetch_sub(1, std::memory_order_seq_cst);
  pending_.erase(entry);
  return operation;
}

OperationQueue::Operation OperationQueue::takePointToPoint() {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].pointToPoint) {
      Operation taken = removeAt(i);
      state_.fetch_sub(kPendingOne, std::memory_order_acq_rel);
      return taken;
    }
  }
  return nullptr;
}

// Note [The worker does not preempt its waker]
// push() wakes the worker, and the thread that pushed an async operation very often waits for it
// next, which runs it on that thread when it is still queued (runIfNext). Under Linux's default
// policy the woken worker preempts a thread on its CPU at once: on a machine with as many busy
// threads as cores (ranks spinning in collectives), often the very thread about to wait, which
// then sleeps until the worker has run the operation and woken it back. So the worker sleeps
// under SCHED_BATCH, which the scheduler never lets preempt on wakeup: a busy CPU takes it at the
// end of the running thread's slice, an idle one at once. Once it has an operation to run it
// goes back to the default policy until it sleeps again, so that the wakeups inside a collective
// (a peer's data arriving) preempt as before: a worker left under SCHED_BATCH throughout made
// data-parallel training slower, its gradients' allreduce waiting out slices of backward's.
// Measured on 2 ranks of the 2-core dev machine (2026-12-07): torch.distributed over chorus,
// whose calls all wait on their Work, 5.5-6.3 us per 8-byte all_reduce against 11-17 us before,
// blocking or async_op=True then wait() (bench/torch_blocking_cost.py); bench/train_bench.py
// unchanged within its noise. The
// price: a thread that polls isCompleted() in a loop without waiting, on cores that are all busy,
// sees its operation start only when a slice ends (about 4 ms here, against 50 us before). Where a
// policy cannot be set (a sandbox may forbid it), nothing changes.
void OperationQueue::setBackground(bool background) noexcept {
  const sched_param parameters{};  // both policies take priority 0
  (void)pthread_setschedparam(pthread_self(), background ? SCHED_BATCH : SCHED_OTHER, &parameters);
}

bool OperationQueue::claimIfIdle() {
  uint64_t idle = 0;
  return state_.compare_exchange_strong(idle, kRunning, std::memory_order_acq_rel,
                                        std::memory_order_relaxed);
}

OperationQueue::Operation OperationQueue::takeHead() {
  Operation operation = removeAt(0);
  state_.fetch_add(kRunning - kPendingOne, std::memory_order_acq_rel);  // one step: never idle
  return operation;
}

bool OperationQueue::runIfNext(const Operation& operation) {
  {
    std::lock_guard lock(mutex_);
    if (runningNow() || pending_.empty() || pending_.front().operation != operation ||
        pending_.front().workerOnly) {
      return false;
    }
    takeHead();
  }
  run(operation);
  return true;
}

OperationQueue::Operation OperationQueue::takeNextIf(bool Entry::*kind) {
  std::lock_guard lock(mutex_);
  if (pending_.empty() || !(pending_.front().*kind))
    return nullptr;
  Operation next = removeAt(0);
  state_.fetch_sub(kPendingOne, std::memory_order_acq_rel);
  return next;
}

OperationQueue::Operation OperationQueue::takeNextPointToPoint() {
  return takeNextIf(&Entry::pointToPoint);
}

OperationQueue::Operation OperationQueue::takeNextCollective() {
  return takeNextIf(&Entry::collective);
}

bool OperationQueue::collectiveQueued() {
  std::lock_guard lock(mutex_);
  return !pending_.empty() && pending_.front().collective;
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
  bool background = false;  // under SCHED_BATCH (Note [The worker does not preempt its waker])
  std::unique_lock lock(mutex_);
  while (true) {
    if (!background && pending_.empty() && !stopping_) {  // about to sleep
      lock.unlock();
      setBackground(background = true);
      lock.lock();
    }
    // Never start while another thread (a waiter that claimed its operation) is running one.
    wake_.wait(lock, [&] { return !runningNow() && (stopping_ || !pending_.empty()); });
    if (pending_.empty())
      return;  // stopping, and everything queued has run
    Operation operation = takeHead();
    lock.unlock();
    if (background)
      setBackground(background = false);
    run(operation);
    lock.lock();
  }
}

}  // namespace chorus::detail
