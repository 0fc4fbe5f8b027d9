// QueuedWork: the Work of an operation on a communicator's queue (OperationQueue), whose waiter
// runs the operation itself when it is next in line; makeWork makes one from per-thread cached
// memory, so a warmed call allocates none. Internal to the runtime (communicator_state.cc and
// communicator_transfers.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "chorus/work.h"
#include "core/check.h"
#include "core/collective.h"
#include "core/thread_cached_allocator.h"
#include "runtime/communicator_state.h"

namespace chorus::detail {

// A Work whose waiter runs the operation itself when it is next in line (see OperationQueue).
class QueuedWork : public Work {
 public:
  QueuedWork(int rank, const Fingerprint& fingerprint, std::weak_ptr<CommunicatorState> state)
      : rank_(rank), fingerprint_(fingerprint), state_(std::move(state)) {}
  void setOperation(const OperationQueue::Operation& operation) { operation_ = operation; }

 protected:
  void runIfNext() noexcept override {
    if (isCompleted())
      return;
    auto state = state_.lock();  // keeps the communicator alive while its operation runs here
    auto operation = operation_.lock();
    if (state && operation)
      state->queue().runIfNext(operation);
  }
  std::string describe() const override {
    return concat("rank ", rank_, ": ", fingerprint_.describe());
  }

 private:
  const int rank_;
  const Fingerprint fingerprint_;
  std::weak_ptr<CommunicatorState> state_;
  // Weak: the operation holds the Work, and is dropped once it has run.
  std::weak_ptr<std::function<void()>> operation_;
};

inline std::shared_ptr<QueuedWork> makeWork(int rank,
                                            const Fingerprint& fingerprint,
                                            std::weak_ptr<CommunicatorState> state) {
  // Per-thread cached memory: a warmed call allocates none.
  return std::allocate_shared<QueuedWork>(ThreadCachedAllocator<QueuedWork>(), rank, fingerprint,
                                          std::move(state));
}

}  // namespace chorus::detail
