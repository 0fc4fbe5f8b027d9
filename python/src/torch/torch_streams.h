// The chorus torch.distributed backend on CUDA tensors: which CUDA stream chorus orders a
// collective after, and which one a wait orders.
//
// Contract:
//  - cudaTensorsSupported(): whether this build takes CUDA tensors. It needs torch >= 2.3, whose
//    c10::Stream gives the raw CUDA stream (native_handle) through c10's device interface, so the
//    extension needs no CUDA headers or libraries of torch's; torch 1.13 (Debian's) has none.
//  - deviceIndex(tensor): the CUDA ordinal of a CUDA tensor, -1 for any other.
//  - firstCudaDevice(lists): the CUDA ordinal of the first CUDA tensor among `lists`, else -1.
//  - TorchStreamScope(device): for its lifetime, chorus's current stream on this thread
//    (chorus/stream.h) is torch's current stream on `device`, as torch.cuda.current_stream() says;
//    for device -1 it changes nothing. So a collective is ordered after what the caller queued
//    on its stream, and a wait orders that stream after it, as torch's NCCL does.
//  - TorchSideStream(device): for its lifetime, torch's current stream on `device` on this thread
//    is one from torch's pool, not the device's default one (which the program computes on); the
//    previous one comes back at the end. For device -1 it changes nothing. A helper thread (the
//    future completer), and the copy-out of a CUDA operation, run there, so that they hold up
//    nothing of the program's.
//  - StreamMark::here(device): a mark (a CUDA event) after the work queued so far on torch's
//    current stream of `device`. reached() asks whether the GPU got there; orderCurrentStream()
//    makes this thread's current stream of that device wait for it, without a host wait.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "chorus/stream.h"

namespace chorus::torch_backend {

bool cudaTensorsSupported();

inline int deviceIndex(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cuda() ? tensor.device().index() : -1;
}

int firstCudaDevice(std::initializer_list<const std::vector<at::Tensor>*> lists);

class TorchStreamScope {
 public:
  explicit TorchStreamScope(int device);
  TorchStreamScope(const TorchStreamScope&) = delete;
  TorchStreamScope& operator=(const TorchStreamScope&) = delete;

 private:
  std::optional<StreamGuard> guard_;
};

class StreamMark {
 public:
  static std::shared_ptr<StreamMark> here(int device);
  ~StreamMark();
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  bool reached() const noexcept;  // true too once the device has failed
  void orderCurrentStream() const noexcept;

 private:
  StreamMark() = default;
  struct Event;
  std::unique_ptr<Event> event_;
  int device_ = -1;
};

class TorchSideStream {
 public:
  explicit TorchSideStream(int device);
  ~TorchSideStream();
  TorchSideStream(const TorchSideStream&) = delete;
  TorchSideStream& operator=(const TorchSideStream&) = delete;

 private:
  std::optional<c10::Stream> previous_;
};

}  // namespace chorus::torch_backend
