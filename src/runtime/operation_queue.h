// OperationQueue: runs a communicator's operations one at a time, in the order they were pushed.
//
// A worker thread (started on first use) runs them in the background, so operations overlap with
// the caller's work. It sleeps under SCHED_BATCH, so waking it never preempts a running thread. A
// thread that is about to block on an operation's result may instead run it itself with
// runIfNext(), when that operation is at the head of the queue and nothing is running: a blocking
// call then costs no thread hand-off (DESIGN §6), and the order is the same.
// Operations must not throw: they report failure through their Work.
//
// Point-to-point operations (Note [Point-to-point overlap], communicator_state.h) are marked when
// pushed: only the worker runs them (runIfNext refuses them), and the one running may take those
// queued right behind it (takeNextPointToPoint) to run them alongside itself, and a collective
// queued right behind them (takeNextCollective). A running collective may take them from
// anywhere in the queue (takePointToPoint), and hand the transfers it started to the worker
// (pushFront): Note [Collectives and transfers together], communicator_transfers.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/thread_annotations.h"

namespace chorus::detail {

class OperationQueue {
 public:
  using Operation = std::shared_ptr<std::function<void()>>;

  OperationQueue() = default;
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  // `collective`: marks a collective, for collectiveQueued() (a send or recv on a backend that
  // does not post them is pushed unmarked, as any other non-collective operation).
  void push(Operation operation, bool pointToPoint = false, bool collective = false);
  // If nothing is queued or running, claims the queue and returns true: the caller then runs its
  // operation itself and calls releaseClaim() when it is done. Otherwise returns false. Takes no
  // lock (Note [Queue state word]); a caller that also pushes serializes the two itself, for order.
  bool claimIfIdle();
  // Runs `operation` on the calling thread if it is next and nothing is running; returns whether
  // it did. Otherwise the worker will run it.
  bool runIfNext(const Operation& operation);
  // For the running operation: removes and returns the next queued operation if it is a
  // point-to-point one; null otherwise.
  Operation takeNextPointToPoint();
  // For the running operation: removes and returns the next queued operation if it is a
  // collective, to run it alongside itself; null otherwise.
  Operation takeNextCollective();
  // Whether a point-to-point operation is queued. One atomic load (sequentially consistent, as the
  // push's count), no lock: for the running operation, which polls it.
  bool pointToPointQueued() const {
    return pointToPointQueued_.load(std::memory_order_seq_cst) > 0;
  }
  // For the running operation: removes and returns the first queued point-to-point operation,
  // wherever it is (collectives queued before it stay, in order); null when there is none.
  Operation takePointToPoint();
  // For the running operation: queues `operation` ahead of everything, to run next once the
  // running one releases the queue, on the worker (runIfNext refuses it, and takePointToPoint and
  // takeNextPointToPoint do not take it).
  void pushFront(Operation operation);
  // Whether the next queued operation is a collective (for error messages: one waits behind).
  bool collectiveQueued();
  // Called by the running operation (on its thread) just before it reports completion, so that a
  // thread its completion wakes finds the queue free: a blocking call issued right after a wait
  // then runs on its own thread. Operations that do not call it are released when they return.
  // Takes no lock unless an operation is queued behind (to wake the worker).
  void releaseRunning();
  // Ends a claim (claimIfIdle) on its claimer's thread, as releaseRunning does.
  void releaseClaim();
  // Runs what is queued, then stops the worker. Idempotent; push() after it is a bug.
  void shutdown();

 private:
  // Note [Queue state word]: whether an operation runs (kRunning) and how many wait in pending_
  // (kPendingOne each), in one atomic word, so that claimIfIdle is one compare-and-swap from 0
  // and releaseRunning one fetch_and. Every other change happens under mutex_: pushing adds
  // kPendingOne (after the entry is in pending_), and whoever takes the head (worker, runIfNext)
  // swaps kPendingOne for kRunning. That swap needs no loop: it happens only while the word counts
  // a pending operation, and then only a mutex_ holder sets kRunning (claimIfIdle needs the word
  // at 0). takeNextPointToPoint removes kPendingOne. One operation runs at a time whatever the
  // callers do; that a claim does not overtake an operation pushed a moment before it is up to
  // the caller, which claims and pushes under one lock of its own (CommunicatorState::mutex_).
  static constexpr uint64_t kRunning = 1;
  static constexpr uint64_t kPendingOne = 2;
  bool runningNow() const { return (state_.load(std::memory_order_acquire) & kRunning) != 0; }

  // Puts the calling thread (the worker) under SCHED_BATCH, or back under SCHED_OTHER (Note [The
  // worker does not preempt its waker], operation_queue.cc).
  static void setBackground(bool background) noexcept;
  void workerLoop();
  void run(const Operation& operation);
  // Pops the head (pending_ not empty, nothing running) and marks it running. Under mutex_.
  Operation takeHead() CHORUS_REQUIRES(mutex_);
  // Removes pending_[index] and returns its operation; the point-to-point count follows, the
  // state word is the caller's. Under mutex_.
  Operation removeAt(size_t index) CHORUS_REQUIRES(mutex_);

  std::mutex mutex_;
  std::condition_variable wake_;
  struct Entry {
    Operation operation;
    bool pointToPoint = false;
    bool collective = false;
    bool workerOnly = false;  // point-to-point, or pushFront's: runIfNext refuses it
  };
  // Removes and returns the head if its flag `kind` is set; null otherwise (the running one's).
  Operation takeNextIf(bool Entry::*kind);

  std::deque<Entry> pending_ CHORUS_GUARDED_BY(mutex_);
  std::atomic<uint64_t> state_{0};
  std::atomic<int> pointToPointQueued_{0};  // entries of pending_ with pointToPoint set
  bool stopping_ CHORUS_GUARDED_BY(mutex_) = false;
  std::thread worker_;
};

}  // namespace chorus::detail
