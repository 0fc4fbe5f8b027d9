// The visible CUDA devices: see cuda_device.h.
#include "backend/nccl/cuda_device.h"

#include <cuda_runtime_api.h>

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend::nccl {

const VisibleDevices& visibleDevices() {
  static const VisibleDevices answer = [] {
    VisibleDevices devices;
    const cudaError_t result = cudaGetDeviceCount(&devices.count);
    if (result != cudaSuccess) {
      cudaGetLastError();
      devices.count = 0;
      devices.whyNone = detail::concat("cudaGetDeviceCount says ", cudaGetErrorName(result), " (",
                                       cudaGetErrorString(result), ")");
    } else if (devices.count == 0) {
      devices.whyNone = "cudaGetDeviceCount found no CUDA device";
    }
    return devices;
  }();
  return answer;
}

void requireDevice(int index, int rank, const std::string& purpose) {
  const VisibleDevices& devices = visibleDevices();
  if (devices.count == 0) {
    throw UnsupportedError(detail::concat("rank ", rank, " (this process): ", purpose,
                                          " needs an NVIDIA GPU, but this process sees "
                                          "none: ",
                                          devices.whyNone,
                                          " (check nvidia-smi and CUDA_VISIBLE_DEVICES)"));
  }
  if (index < 0 || index >= devices.count) {
    throw InvalidArgumentError(detail::concat(
        "rank ", rank, " (this process): ", purpose, " asked for CUDA device ", index,
        ", but this process sees ", devices.count, " (cuda:0 to cuda:", devices.count - 1,
        "; CUDA_VISIBLE_DEVICES renumbers them)"));
  }
}

}  // namespace chorus::backend::nccl
