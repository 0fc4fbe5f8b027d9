// DeviceWork: the Work of a collective on CUDA tensors (chorus/work.h, chorus/stream.h). It wraps
// the backend's DeviceCompletion: wait() orders the waiting thread's current stream after the
// collective and completes; isCompleted() asks the device; synchronize() waits on the host. A
// failure seen by any of them completes the Work with that error.
#pragma once

#include <memory>
#include <string>

#include "backend/device_backend.h"
#include "chorus/work.h"
#include "core/collective.h"
#include "core/deadline.h"

namespace chorus::detail {

class DeviceWork final : public Work {
 public:
  // `completion` null: a Work that failed before anything was enqueued, with `error`.
  DeviceWork(int worldRank,
             const Fingerprint& fingerprint,
             std::shared_ptr<backend::DeviceCompletion> completion,
             std::exception_ptr error = nullptr);

  bool isCompleted() const override;
  // Blocks the host until the collective ended on the device, or `deadline` (TimeoutError; the
  // communicator is then aborted). Rethrows the collective's failure.
  void synchronize(Deadline deadline);

 protected:
  void beforeWait() noexcept override;
  std::string describe() const override;

 private:
  const int worldRank_;
  const Fingerprint fingerprint_;
  const std::shared_ptr<backend::DeviceCompletion> completion_;
};

}  // namespace chorus::detail
