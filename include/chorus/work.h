// chorus/work.h — the handle of an operation in flight.
//
// Contract:
//  - Every Communicator operation returns a std::shared_ptr<Work> at once; the operation runs in
//    the background, after all operations issued earlier on the same communicator.
//  - wait() blocks until the operation finished; if it failed, wait() rethrows its exception (a
//    chorus::Error). wait(timeout) throws TimeoutError if the operation is still running after
//    `timeout`; the operation itself goes on and can be waited for again. Waiting again after
//    completion returns (or rethrows) at once.
//  - waitFor(timeout) is wait(timeout) without the exception for an expired wait: it returns true
//    when the operation completed successfully, rethrows its failure when it failed, and returns
//    false when `timeout` passed first (the operation goes on). waitFor(0ms) only looks. A negative
//    timeout (kNoTimeout) waits as wait() does, and then returns true.
//  - isCompleted() and exception() never block. exception() is null while running or after success.
//  - Work is thread-safe: any thread may wait. Buffers passed to the operation must stay alive and
//    untouched while buffersInUse() says so: until the Work completes, for host operations; for
//    collectives on CUDA tensors, until the device has finished with them, which after a failure
//    may be later than the Work's completion (the error is raised at once, while an aborted NCCL
//    kernel may still be running).
//  - Only the implementation completes a Work, exactly once, with the protected finish(); a
//    progress thread never throws, it finishes the Work with the exception instead. Users cannot
//    complete a Work they were given.
//  - wait() and waitFor() with no timeout may run a queued operation on the waiting thread itself
//    when it is next in line (runIfNext), so a blocking call costs no thread hand-off; order is
//    unchanged. A wait with a timeout never does, so it returns within its timeout.
//    runHereIfNext() offers the calling thread in the same way without waiting, for a caller that
//    then waits in timed slices of its own.
//  - Collectives on CUDA tensors return a DeviceWork (chorus/stream.h): it is complete, for wait(),
//    once the waiting thread's current stream is ordered after the collective (no host wait; every
//    later wait() orders its own thread's current stream too);
//    isCompleted() asks the device whether the collective has ended; synchronize() waits for that
//    on the host (for host operations, synchronize() is wait()).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

namespace chorus {

namespace detail {
class CommunicatorState;
}

class Work {
 public:
  static constexpr std::chrono::milliseconds kNoTimeout{-1};

  explicit Work(std::string description = {});
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait(std::chrono::milliseconds timeout = kNoTimeout);
  // True: completed successfully. False: `timeout` passed first. Rethrows the failure.
  bool waitFor(std::chrono::milliseconds timeout);
  virtual bool isCompleted() const;
  // Blocks the host until the operation's effects are complete where they happen, and rethrows
  // its failure: wait() for host operations; for collectives on CUDA tensors, until the GPU has
  // finished them (wait() only orders the current stream after them). Bounded by the operation's
  // own deadline (CHORUS_TIMEOUT), which the communicator enforces.
  virtual void synchronize();
  // Whether the operation may still read or write the buffers it was given (never blocks, never
  // throws): true while it runs; for a collective on CUDA tensors, until the device has finished
  // or stopped its work, also after the Work completed with a failure.
  virtual bool buffersInUse() const;
  std::exception_ptr exception() const;
  // What a wait without a timeout does first: runs the operation on the calling thread if it is
  // queued next and nothing runs (see runIfNext); returns at once otherwise. It then blocks for
  // the operation's length, bounded by the operation's own deadline only. For a caller that waits
  // without a timeout in slices of its own (Python, to see signals between them).
  void runHereIfNext() noexcept {
    if (!isCompleted())
      runIfNext();
  }
  // For a recv: the rank (of its communicator) that sent the message, once completed successfully
  // (a recv from Communicator::kAnySource learns it then). -1 for other operations.
  int sourceRank() const { return sourceRank_; }
  // What this operation is, e.g. "rank 0: allreduce #12 (float32 x 1024, sum)"; built when asked.
  std::string description() const { return describe(); }

 protected:
  // Marks the operation done; `error` null means success. Called once, by the implementation,
  // which holds a reference to the Work for the length of the call; later calls are ignored.
  void finish(std::exception_ptr error = nullptr) noexcept;
  // Called by a wait without a timeout before it blocks: an implementation may run the operation
  // here, on the waiting thread, if nothing must run before it. Default: nothing.
  virtual void runIfNext() noexcept {}
  // Called by every wait before it looks at the state: an implementation may complete the Work
  // here (DeviceWork orders the waiter's stream). Default: nothing.
  virtual void beforeWait() noexcept {}
  // The description; by default the one given to the constructor. Implementations may build it
  // only when asked, keeping string formatting off the path of every call.
  virtual std::string describe() const { return description_; }

 private:
  // The runtime's communicators run the operations and finish their Works.
  friend class detail::CommunicatorState;

  // Waits until completed_ is set, or until `timeout` has passed unless `unbounded`. False: the
  // timeout passed first.
  bool awaitCompletion(bool unbounded, std::chrono::milliseconds timeout);

  // Completion without a lock (a blocking call that ran on its caller's thread takes none): the
  // finisher writes error_, then sets completed_ (1), then wakes the futex on completed_ if a
  // waiter has announced itself in waiters_; a waiter announces itself, then checks completed_
  // before it sleeps (both sequentially consistent, so one of them sees the other).
  const std::string description_;
  std::atomic<bool> finishing_{false};  // the first finish() wins
  std::atomic<uint32_t> completed_{0};
  std::atomic<uint32_t> waiters_{0};
  std::exception_ptr error_;  // written before completed_, read after it
  int sourceRank_ = -1;       // written before completed_ (or before the Work is handed out)
};

}  // namespace chorus
