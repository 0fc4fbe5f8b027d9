// The chorus torch.distributed backend: turning torch's tensors, reduce ops and errors into
// chorus's, and chorus's errors back into torch's.
//
// Contract:
//  - typed() maps a dense tensor of a dtype chorus reduces (every chorus DataType; uint16,
//    uint32 and uint64 from torch 2.3) to a chorus::Tensor over the same memory, with
//    its shape, strides and device (chorus itself refuses a non-contiguous one, naming it).
//  - bytes() views a contiguous dense tensor of any dtype as its raw bytes (a flat uint8
//    chorus::Tensor): the data-movement operations (broadcast, gather, alltoall, send...) copy
//    bytes, so they take every dtype torch has.
//  - Both take CPU tensors, and CUDA tensors where cudaTensorsSupported() (torch_streams.h;
//    chorus runs those on its nccl backend). Each refuses, with a message naming `what` and the
//    operation, a tensor on another device, a sparse one, or a dtype chorus does not reduce.
//  - toChorus() maps a torch ReduceOp; PREMUL_SUM is refused.
//  - rethrowAsTorchError() turns the exception in flight (a chorus::Error or anything else) into
//    the error torch raises for a failed collective (DistBackendError where torch has it, else
//    RuntimeError), keeping chorus's message, which names the ranks involved.
#pragma once

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "chorus/tensor.h"
#include "chorus/types.h"

namespace chorus::torch_backend {

chorus::Tensor typed(const at::Tensor& tensor, std::string_view what, std::string_view op);
chorus::Tensor bytes(const at::Tensor& tensor, std::string_view what, std::string_view op);
// `tensor` (an item of a list form's inputs or outputs) is on `like`'s device; else torch's error
// naming both.
void checkSameDevice(const at::Tensor& tensor,
                     const at::Tensor& like,
                     std::string_view what,
                     std::string_view op);
chorus::ReduceOp toChorus(const c10d::ReduceOp& op, std::string_view opName);
// "torch.int16": a dtype as a torch user writes it.
std::string dtypeName(at::ScalarType type);

// The byte helpers of the operations that copy bytes:
// checkListLength: torch's error unless a list form's list holds one tensor per rank (`size`).
void checkListLength(size_t length, int size, const char* what, const char* op);
// asBytes: `tensor`'s bytes, a flat uint8 tensor (over the same memory when it is contiguous).
at::Tensor asBytes(const at::Tensor& tensor);
// copyBytesInto: copies the raw bytes `from` (a flat uint8 tensor of to.nbytes()) into `to`, of any
// layout, on its device (on a CUDA one, queued on the current stream).
void copyBytesInto(const at::Tensor& to, at::Tensor from);
// packed: `tensors` laid end to end (their bytes), each `stride` bytes apart, on `where`'s device.
at::Tensor packed(const std::vector<at::Tensor>& tensors, int64_t stride, const at::Tensor& where);
// byteBuffer: a flat uint8 tensor of `bytes` on the device of `where`.
at::Tensor byteBuffer(int64_t bytes, const at::Tensor& where);

// Call inside a catch block only.
[[noreturn]] void rethrowAsTorchError();
[[noreturn]] void throwTorchError(const std::string& message);

// Runs `body`, turning any exception it throws into torch's error.
template <typename Body>
auto translated(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (...) {
    rethrowAsTorchError();
  }
}

}  // namespace chorus::torch_backend
