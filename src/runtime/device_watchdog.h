// DeviceWatchdog: the thread that keeps a communicator's CUDA collectives from hanging unseen.
// Work on the GPU runs long after the call that queued it returned, and NCCL never gives up on
// its own: a peer that died mid-collective, or one that never calls, leaves the kernel spinning
// and the program stuck in whatever waits on its stream next (torch's watchdog waits 10-30
// minutes). So while device work is outstanding, every kPollInterval the watchdog:
//   - asks the oldest outstanding completions whether they ended (their isCompleted() also
//     reports the backend's asynchronous errors: NCCL's, a communicator aborted elsewhere);
//   - gives up on the oldest one once its deadline (CHORUS_TIMEOUT after the call) has passed
//     and its host check (Note [Device fingerprint check]) finished: every rank called it, so the
//     device is stuck (a check still running raises its own error, which names the absent ranks);
//   - every kStoreInterval, reads the launcher's record of a failed rank (store/rank_failure.h),
//     which is how a death is seen when no connection of this process closes.
// Whatever it finds goes to `fail` once (a PeerError naming the dead rank when the launcher
// recorded one, else the error seen), which aborts the communicator, its NCCL communicator
// included, so the kernels end and every later call and wait raises. It then stops watching.
//
// Cost: nothing while no device work is outstanding (the thread sleeps on a condition
// variable); otherwise one wake-up per kPollInterval and one store round trip per kStoreInterval.
// Thread safety: watch() from any thread; the destructor stops and joins the thread, and `fail`
// is never called after it returned.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/device_backend.h"
#include "chorus/work.h"
#include "core/collective.h"
#include "core/deadline.h"
#include "core/thread_annotations.h"
#include "store/store.h"
#include "trace/recorder.h"

namespace chorus::detail {

// `seen`, a failure of this rank's device work, named after the launcher's record of a failed
// rank (store/rank_failure.h), waiting for one until `wait`, unless it is chorus's own verdict
// already (a MismatchError, a TimeoutError, or a PeerError that names its rank) or `jobStore` is
// null: NCCL reports a peer's death as a remote error that names nobody, as soon as its socket
// closes, a few milliseconds before chorusrun has reaped the rank and recorded it. `seen` itself
// when nothing names it.
std::exception_ptr nameFailedRank(std::exception_ptr seen,
                                  store::Store* jobStore,
                                  int worldRank,
                                  const Fingerprint& fingerprint,
                                  Deadline wait);

class DeviceWatchdog {
 public:
  // How long a device failure that names nobody waits for the launcher's record of a death.
  static constexpr std::chrono::milliseconds kRecordGrace{2000};
  static constexpr std::chrono::milliseconds kPollInterval{20};
  static constexpr std::chrono::milliseconds kStoreInterval{250};

  using Fail = std::function<void(std::exception_ptr)>;

  // How many of `count` entries, which end in order (a prefix of them has ended), have ended, by
  // binary search: at most about log2(count) + 1 calls of ended(i). An ended(i) that throws stops
  // the search at what was found before it.
  static size_t endedPrefix(size_t count, const std::function<bool(size_t)>& ended);

  // `jobStore`: the job's unscoped store (null when there is none, e.g. under mpirun).
  DeviceWatchdog(int worldRank, std::shared_ptr<store::Store> jobStore, Fail fail);
  ~DeviceWatchdog();
  DeviceWatchdog(const DeviceWatchdog&) = delete;
  DeviceWatchdog& operator=(const DeviceWatchdog&) = delete;

  // Watches one call's completion until it ends. Calls come in their enqueue order (the caller
  // holds its device lock across enqueue and watch), so completions end in the order watched.
  // `check`: the call's host check (null when it has none: point-to-point, one rank). `ticket`: the
  // call's flight record, begun at its enqueue and ended here when the watchdog sees it complete
  // (within kPollInterval) or fail (Note [Flight recorder]).
  void watch(std::shared_ptr<backend::DeviceCompletion> completion,
             std::shared_ptr<Work> check,
             const Fingerprint& fingerprint,
             Deadline deadline,
             trace::Ticket ticket = {});

 private:
  struct Watched {
    std::shared_ptr<backend::DeviceCompletion> completion;
    std::shared_ptr<Work> check;
    Fingerprint fingerprint;
    Deadline deadline = Deadline::never();
    trace::Ticket ticket;
  };

  void run();
  // One round: drops what ended; the failure found, if any.
  std::exception_ptr inspect(bool readStore);
  // Pops the completions that ended, found with O(log n) queries: see the definition.
  void popEndedPrefix();
  std::exception_ptr timedOut(const Watched& oldest) const;

  const int worldRank_;
  const std::shared_ptr<store::Store> jobStore_;
  const Fail fail_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Watched> watched_ CHORUS_GUARDED_BY(mutex_);
  bool stopping_ CHORUS_GUARDED_BY(mutex_) = false;
  bool failed_ CHORUS_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace chorus::detail
