#include "torch_streams.h"

#include <c10/util/Exception.h>

#if CHORUS_TORCH_CUDA_STREAMS
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#endif

namespace chorus::torch_backend {

bool cudaTensorsSupported() { return CHORUS_TORCH_CUDA_STREAMS != 0; }

TorchStreamScope::TorchStreamScope(int device) {
  if (device < 0)
    return;
#if CHORUS_TORCH_CUDA_STREAMS
  const c10::impl::DeviceGuardImplInterface* cuda =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const c10::Stream current =
      cuda->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  guard_.emplace(reinterpret_cast<CudaStream>(current.native_handle()));
#else
  TORCH_CHECK(false,
              "chorus: this build of the torch backend takes no CUDA tensors (it needs "
              "torch >= 2.3 at build time)");
#endif
}

}  // namespace chorus::torch_backend
