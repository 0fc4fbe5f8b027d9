// The chorus torch.distributed backend on CUDA tensors: which CUDA stream chorus orders a
// collective after, and which one a wait orders.
//
// Contract:
//  - cudaTensorsSupported(): whether this build takes CUDA tensors. It needs torch >= 2.3, whose
//    c10::Stream gives the raw CUDA stream (native_handle) through c10's device interface, so the
//    extension needs no CUDA headers or libraries of torch's; torch 1.13 (Debian's) has none.
//  - deviceIndex(tensor): the CUDA ordinal of a CUDA tensor, -1 for any other.
//  - TorchStreamScope(device): for its lifetime, chorus's current stream on this thread
//    (chorus/stream.h) is torch's current stream on `device`, as torch.cuda.current_stream() says;
//    for device -1 it changes nothing. So a collective is ordered after what the caller queued
//    on its stream, and a wait orders that stream after the collective, as torch's NCCL does.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "chorus/stream.h"

namespace chorus::torch_backend {

bool cudaTensorsSupported();

inline int deviceIndex(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cuda() ? tensor.device().index() : -1;
}

class TorchStreamScope {
 public:
  explicit TorchStreamScope(int device);
  TorchStreamScope(const TorchStreamScope&) = delete;
  TorchStreamScope& operator=(const TorchStreamScope&) = delete;

 private:
  std::optional<StreamGuard> guard_;
};

}  // namespace chorus::torch_backend
