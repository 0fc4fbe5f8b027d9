// Shared declarations of the _chorus extension module (pybind11). The module converts types only:
// Python passes DLPack capsules, this layer makes chorus::Tensor views of them and calls the C++
// Communicator; every blocking wait runs with the GIL released.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::python {

namespace py = pybind11;

// Creates chorus.Error and its subclasses in `module` and installs the C++ -> Python translator.
void bindErrors(py::module_& module);
// DistConfig (a view of the process-wide config) and DistContext helpers.
void bindConfig(py::module_& module);
// Communicator objects and the collective / point-to-point operations.
void bindOperations(py::module_& module);
// The short path of a blocking allreduce of one NumPy array (allreduce_array).
void bindShortCalls(py::module_& module);
// PendingWork, the handle of an async operation.
void bindWork(py::module_& module);
// GradientReducer, the data-parallel core under chorus.torch.DistributedDataParallel.
void bindReducer(py::module_& module);
// FlatOptimizer: SGD / Adam / AdamW on a flat float32 shard (ZeRO).
void bindOptimizers(py::module_& module);
// ZeroEngine: ZeRO stages 1-3, the core under chorus.torch.ZeroOptimizer.
void bindZero(py::module_& module);

// A Tensor viewing the DLPack capsule `capsule` (which must stay alive while the view is used).
// A non-empty `dtype` replaces the exported element type (bool arrives as uint8 of equal size).
// Host or CUDA memory: the collectives route CUDA tensors themselves.
Tensor tensorFromCapsule(py::handle capsule, const std::string& dtype);
// tensorFromCapsule for what reads the memory on the host (optimizers, ZeRO): UnsupportedError
// naming `what` for a CUDA tensor.
Tensor hostTensorFromCapsule(py::handle capsule, const std::string& dtype, const char* what);

// A DLPack capsule of `view` that keeps `owner` (the memory under the view) alive until the
// consumer (e.g. torch.utils.dlpack.from_dlpack) drops the tensor, or until the capsule dies
// unconsumed.
py::capsule ownedViewCapsule(const Tensor& view, std::shared_ptr<const void> owner);

// Results of 4 MiB and more get huge pages before their first touch (chorus/huge_pages.h): a
// 64 MiB result would otherwise spend most of its time in page faults. Host tensors only.
void adviseHugePagesIfLarge(const Tensor& result);

// Finishes an issued operation: with `async` false waits (GIL released) and returns None; with
// `async` true returns a PendingWork that keeps `keepAlive` (the Python buffers) until it is done.
py::object finishOperation(std::shared_ptr<Work> work, py::object keepAlive, bool async);

// Drops the Python references held for async operations that completed after their handle was
// discarded. Call with the GIL held.
void sweepAbandonedWork();
// Waits (GIL released) for every abandoned operation, then drops their references.
void drainAbandonedWork();

}  // namespace chorus::python
