// DeviceWork: the Work of a collective on CUDA tensors (chorus/work.h, chorus/stream.h). It wraps
// the backend's DeviceCompletion and the call's host check (Note [Device fingerprint check] in
// communicator_state.h): wait() orders the waiting thread's current stream after the collective
// and completes, without waiting for the check (a check that already failed is raised); each
// wait() orders its thread's current stream, the first and every later one;
// isCompleted() is true once both the device and the check are done; synchronize() waits for both
// on the host. A failure seen by any of them completes the Work with that error (a host wait
// first asks chorusrun's record whom to blame: NCCL names no dead peer, the launcher does).
#pragma once

#include <memory>
#include <string>

#include "backend/device_backend.h"
#include "chorus/work.h"
#include "core/collective.h"
#include "core/deadline.h"
#include "store/store.h"

namespace chorus::detail {

class DeviceWork final : public Work {
 public:
  // `error`: a Work that failed at the call, whose `completion` (null if nothing was enqueued)
  // only says when the device has stopped what the call launched (buffersInUse). `check`:
  // the call's host check, or null when it has none. `jobStore`: where chorusrun records a dead
  // rank, which a host wait's failure is named after (nameFailedRank in device_watchdog.h).
  DeviceWork(int worldRank,
             const Fingerprint& fingerprint,
             std::shared_ptr<backend::DeviceCompletion> completion,
             std::exception_ptr error = nullptr,
             std::shared_ptr<Work> check = nullptr,
             std::shared_ptr<store::Store> jobStore = nullptr);

  bool isCompleted() const override;
  // Blocks the host until the collective ended on the device and its check passed, or `deadline`
  // (TimeoutError; the communicator is then aborted). Rethrows the collective's failure.
  void synchronize(Deadline deadline);
  // Until the watchdog or the check ends it, if it does not end by itself.
  void synchronize() override { synchronize(Deadline::never()); }
  // Until the device has finished or stopped the collective, whatever the Work's completion says.
  bool buffersInUse() const override;

 protected:
  void beforeWait() noexcept override;
  std::string describe() const override;

 private:
  const int worldRank_;
  const Fingerprint fingerprint_;
  // The check's failure, once it failed; null while it runs or after it passed.
  std::exception_ptr checkFailure() const;

  const std::shared_ptr<backend::DeviceCompletion> completion_;
  const bool failedAtCall_;
  const std::shared_ptr<Work> check_;
  const std::shared_ptr<store::Store> jobStore_;
};

}  // namespace chorus::detail
