// Which CUDA devices this process can use, asked of the CUDA runtime once: the nccl backend's
// refusal when there are none, and the skip reason of GPU tests on machines without a GPU.
//
// CUDA answers without a GPU too (cudaErrorNoDevice, or cudaErrorInsufficientDriver where no
// driver is installed), so these calls are safe on every machine. Thread-safe.
#pragma once

#include <string>

namespace chorus::backend::nccl {

struct VisibleDevices {
  int count = 0;
  // Why count is 0, in CUDA's words ("cudaErrorNoDevice (no CUDA-capable device is detected)");
  // empty when count > 0.
  std::string whyNone;
};

// Asked once per process; later calls return the first answer.
const VisibleDevices& visibleDevices();

// Throws UnsupportedError, naming this process's `rank` and what `purpose` needed a GPU, when
// device `index` is not one of the visible devices (none at all: CUDA's reason; index out of
// range: how many there are).
void requireDevice(int index, int rank, const std::string& purpose);

}  // namespace chorus::backend::nccl
