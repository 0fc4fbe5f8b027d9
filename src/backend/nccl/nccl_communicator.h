// NcclCommunicator: one non-blocking NCCL communicator (ncclConfig_t.blocking = 0) and its
// lifetime. Non-blocking, because a blocking NCCL call cannot be interrupted: with blocking = 0
// every NCCL call returns at once (ncclInProgress while it is still being set up), so chorus can
// keep its deadlines, and ncclCommAbort from another thread ends whatever is stuck.
//
// Made by create() (ncclCommInitRankConfig over a shared unique id) or split() (ncclCommSplit of
// a parent, the way rank_list groups are made). Destroying it finalizes the communicator
// (ncclCommFinalize, then ncclCommDestroy) unless it was aborted or failed, in which case it is
// aborted. Thread safety: abort() and asyncError() may be called from any thread; the rest from
// the owner's thread. ncclCommAbort frees the communicator, so every use of the ncclComm_t goes
// through call(), which holds the lock that abort() takes and refuses an aborted communicator.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "core/deadline.h"

namespace chorus::backend::nccl {

struct CommunicatorSpec {
  int rank = 0;  // in the communicator
  int size = 1;
  int device = 0;     // CUDA ordinal; made current while NCCL sets up
  int worldRank = 0;  // for messages
  std::string name;   // NCCL's commName (its logs), e.g. "chorus:world"
  Deadline deadline = Deadline::never();
};

class NcclCommunicator {
 public:
  // Collective over the `spec.size` processes that pass the same id. TimeoutError when NCCL's
  // setup has not finished by the deadline (the half-made communicator is aborted); NCCL's errors
  // through checkNccl.
  static std::unique_ptr<NcclCommunicator> create(const ncclUniqueId& id,
                                                  const CommunicatorSpec& spec);
  // Collective over this communicator's members: those with the same `color` form a new
  // communicator, ordered by `key`; NCCL_SPLIT_NOCOLOR (-1) joins none and returns null.
  std::unique_ptr<NcclCommunicator> split(int color, int key, const CommunicatorSpec& spec);

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator();

  // Runs `use(comm)` (one NCCL call on the communicator) and returns its result; ncclInvalidUsage
  // without calling it once the communicator was aborted.
  template <typename Use>
  ncclResult_t call(Use use) {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_.load() ? ncclInvalidUsage : use(comm_);
  }
  int rank() const { return spec_.rank; }
  int size() const { return spec_.size; }
  int device() const { return spec_.device; }

  // After an NCCL call on this communicator returned: nothing more for ncclSuccess (done; a
  // collective's later errors come asynchronously); for ncclInProgress waits while NCCL still
  // works on the call's setup, then throws its error if it failed; throws any other result.
  // `call` names the NCCL function. On the deadline the communicator is aborted: TimeoutError.
  // `spinFor`: how long to ask without sleeping (backoff.h); a collective's launch, which is
  // microseconds away, wants some; a setup (ms to s) none.
  void settle(ncclResult_t result,
              const char* call,
              Deadline deadline,
              std::chrono::microseconds spinFor = std::chrono::microseconds(0));
  // NCCL's asynchronous state: ncclSuccess, ncclInProgress, or the error that broke it.
  ncclResult_t asyncError() noexcept;
  // Ends every operation in flight on the communicator; later calls fail. Idempotent.
  void abort() noexcept;
  bool aborted() const noexcept { return aborted_.load(); }

 private:
  NcclCommunicator(ncclComm_t comm, CommunicatorSpec spec) : comm_(comm), spec_(std::move(spec)) {}
  // ncclConfig_t for a new communicator: non-blocking, named.
  static ncclConfig_t configFor(const CommunicatorSpec& spec);
  // ncclGetLastError's words about this communicator ("" when it has none).
  std::string lastError();

  std::mutex mutex_;
  ncclComm_t comm_;
  CommunicatorSpec spec_;
  std::atomic<bool> aborted_{false};
};

}  // namespace chorus::backend::nccl
