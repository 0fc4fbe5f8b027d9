#include "torch_streams.h"

#include <c10/util/Exception.h>

#if CHORUS_TORCH_CUDA_STREAMS
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#endif

namespace chorus::torch_backend {
namespace {

#if CHORUS_TORCH_CUDA_STREAMS
const c10::impl::DeviceGuardImplInterface& cudaInterface() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

c10::Device cudaDevice(int device) {
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
}
#endif

[[maybe_unused]] [[noreturn]] void refuseCuda() {
  TORCH_CHECK(false,
              "chorus: this build of the torch backend takes no CUDA tensors (it needs "
              "torch >= 2.3 at build time)");
}

}  // namespace

bool cudaTensorsSupported() { return CHORUS_TORCH_CUDA_STREAMS != 0; }

int firstCudaDevice(std::initializer_list<const std::vector<at::Tensor>*> lists) {
  for (const auto* list : lists) {
    for (const auto& tensor : *list) {
      if (deviceIndex(tensor) >= 0)
        return deviceIndex(tensor);
    }
  }
  return -1;
}

TorchStreamScope::TorchStreamScope(int device) {
  if (device < 0)
    return;
#if CHORUS_TORCH_CUDA_STREAMS
  const c10::Stream current = cudaInterface().getStream(cudaDevice(device));
  guard_.emplace(reinterpret_cast<CudaStream>(current.native_handle()));
#else
  refuseCuda();
#endif
}

#if CHORUS_TORCH_CUDA_STREAMS
struct StreamMark::Event {
  c10::Event event{c10::DeviceType::CUDA};
};
#else
struct StreamMark::Event {};
#endif

std::shared_ptr<StreamMark> StreamMark::here(int device) {
  std::shared_ptr<StreamMark> mark(new StreamMark());
  mark->device_ = device;
#if CHORUS_TORCH_CUDA_STREAMS
  mark->event_ = std::make_unique<Event>();
  mark->event_->event.record(cudaInterface().getStream(cudaDevice(device)));
#else
  refuseCuda();
#endif
  return mark;
}

StreamMark::~StreamMark() = default;

bool StreamMark::reached() const noexcept {
#if CHORUS_TORCH_CUDA_STREAMS
  try {
    return event_->event.query();
  } catch (...) {  // the device failed: nothing of this mark's runs any more
    return true;
  }
#else
  return true;
#endif
}

void StreamMark::orderCurrentStream() const noexcept {
#if CHORUS_TORCH_CUDA_STREAMS
  try {
    event_->event.block(cudaInterface().getStream(cudaDevice(device_)));
  } catch (...) {  // the device failed: the operation's own wait reports it
  }
#endif
}

TorchSideStream::TorchSideStream(int device) {
  if (device < 0)
    return;
#if CHORUS_TORCH_CUDA_STREAMS
  previous_ =
      cudaInterface().exchangeStream(cudaInterface().getStreamFromGlobalPool(cudaDevice(device)));
#else
  refuseCuda();
#endif
}

TorchSideStream::~TorchSideStream() {
#if CHORUS_TORCH_CUDA_STREAMS
  if (previous_)
    cudaInterface().exchangeStream(*previous_);
#endif
}

}  // namespace chorus::torch_backend
