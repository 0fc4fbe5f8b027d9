// torch_view.h — chorus Tensors over torch CPU tensors, read through torch's Python API without
// linking libtorch: how the short calls (short_calls.cc) take torch tensors as they take NumPy
// arrays, with no DLPack capsule and no Python frame.
//
// Contract:
//  - torchTensor(object, shaped): a Tensor over `object`'s memory when torch is imported and
//    `object` is exactly a torch.Tensor (not a subclass such as nn.Parameter) that is on the CPU,
//    strided, contiguous, without the negative or conjugate bit, and of a chorus dtype (every
//    DataType by its name, where torch has it): flat (one dimension), or of the tensor's
//    shape if `shaped`. nullopt for anything else, which the general path handles. It never
//    imports torch, and reads each tensor with a few attribute reads and method calls.
//  - isTorchTensor(object): whether torch is imported and `object` is exactly a torch.Tensor.
//  - emptyTorchLike(like, extents): a new contiguous CPU tensor of `like`'s dtype and device, and
//    of `extents` (torch.empty).
//  - Writing into a tensor through the Tensor does not bump torch's version counter, as
//    torch.distributed's collectives in place do not (torch 1.13). The Tensor holds no reference
//    to the storage: the caller keeps the tensor object alive, and another thread must not swap
//    or free its storage (set_, resize_) while an operation runs on it.
//  - Needs the GIL. Throws py::error_already_set where torch raises.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <span>

#include "chorus/tensor.h"

namespace chorus::python {

namespace py = pybind11;

std::optional<Tensor> torchTensor(py::handle object, bool shaped = false);
bool isTorchTensor(py::handle object);
py::object emptyTorchLike(py::handle like, std::span<const int64_t> extents);

}  // namespace chorus::python
