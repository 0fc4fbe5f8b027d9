// Shared declarations of the _chorus extension module (pybind11). The module converts types only:
// Python passes DLPack capsules, this layer makes chorus::Tensor views of them and calls the C++
// Communicator; every blocking wait runs with the GIL released.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::python {

namespace py = pybind11;

// Creates chorus.Error and its subclasses in `module` and installs the C++ -> Python translator.
void bindErrors(py::module_& module);
// DistConfig (a view of the process-wide config) and DistContext helpers.
void bindConfig(py::module_& module);
// Communicator objects, the ReduceOp and DataType enums, and one function per Communicator
// operation (operations.cc).
void bindOperations(py::module_& module);
// The short paths of every operation (short_calls.h): allreduce_array, ..., recv_array (blocking,
// one NumPy array or torch CPU tensor, the world) and barrier_world.
void bindShortCalls(py::module_& module);
// front and set_world (front_calls.cc): the package's public operations as CPython functions
// that take the short paths without a Python frame.
void bindFronts(py::module_& module);
// note_rank_list and forget_rank_lists (rank_lists.h): rank_lists the fronts take.
void bindRankLists(py::module_& module);
// rows_signature, extents_signature, agree_on_rows and agree_on_extents (uneven_agreement.h): the
// agreement of the uneven collectives.
void bindUnevenAgreement(py::module_& module);
// PendingWork, the handle of an async operation.
void bindWork(py::module_& module);
// GradientReducer, the data-parallel core under chorus.torch.DistributedDataParallel.
void bindReducer(py::module_& module);
// FlatOptimizer: SGD / Adam / AdamW on a flat float32 shard (ZeRO).
void bindOptimizers(py::module_& module);
// ZeroEngine: ZeRO stages 1-3, the core under chorus.torch.ZeroOptimizer.
void bindZero(py::module_& module);
// trace_start, trace_stop, trace_active, trace_path, trace_merge (chorus/trace.h).
void bindTrace(py::module_& module);
// encode_plain and decode_plain (plain_data.cc): the object collectives' format, walked in C++.
void bindPlainData(py::module_& module);

// A Tensor viewing the DLPack capsule `capsule` (which must stay alive while the view is used).
// A `dtype` replaces the exported element type (bool arrives as uint8 of equal size).
// Host or CUDA memory: the collectives route CUDA tensors themselves.
Tensor tensorFromCapsule(py::handle capsule, std::optional<DataType> dtype);
// tensorFromCapsule for what reads the memory on the host (optimizers, ZeRO): UnsupportedError
// naming `what` for a CUDA tensor.
Tensor hostTensorFromCapsule(py::handle capsule, const char* what);

// A DLPack capsule of `view` that keeps `owner` (the memory under the view) alive until the
// consumer (e.g. torch.utils.dlpack.from_dlpack) drops the tensor, or until the capsule dies
// unconsumed.
py::capsule ownedViewCapsule(const Tensor& view, std::shared_ptr<const void> owner);

// Results of kHugePagesBytes (4 MiB) and more get huge pages before their first touch
// (chorus/huge_pages.h): a 64 MiB result would otherwise spend most of its time in page faults.
// Host tensors only.
inline constexpr size_t kHugePagesBytes = 4u << 20;
void adviseHugePagesIfLarge(const Tensor& result);

// Finishes an issued operation: with `async` false waits (GIL released) and returns None; with
// `async` true returns a PendingWork that keeps `keepAlive` (the Python buffers) until it is done.
py::object finishOperation(std::shared_ptr<Work> work, py::object keepAlive, bool async);

// Drops the Python references held for async operations that completed after their handle was
// discarded. Call with the GIL held.
void sweepAbandonedWork();
// Keeps `keepAlive` while `work` may use its buffers (sweepAbandonedWork drops it once
// Work::buffersInUse() is false). GIL held.
void abandon(std::shared_ptr<Work> work, py::object keepAlive);
// Drops `keepAlive` now if `work` no longer uses its buffers, else abandons it. GIL held.
void releaseWhenUnused(const std::shared_ptr<Work>& work, py::object& keepAlive);

// Runs one operation for Python, GIL held on entry: `issue()` issues it (returning its Work) with
// the GIL released, under BlockingCalls unless `async` (so a blocking call on an idle communicator
// runs on this thread). A blocking call returns None once the operation is done, rethrowing its
// failure; an async one returns a PendingWork. `keepAlive()` gives the Python objects that own the
// operation's memory; it is called only when they must outlive this call (async, or a blocking
// call still running after issue), so a blocking call that finishes at once builds nothing.
template <typename Issue, typename KeepAlive>
py::object runOperation(bool async, Issue&& issue, KeepAlive&& keepAlive) {
  sweepAbandonedWork();
  std::shared_ptr<Work> work;
  bool done;
  try {
    py::gil_scoped_release release;
    std::optional<BlockingCalls> blocking;
    if (!async)
      blocking.emplace();
    work = issue();
    done = !async && work->waitFor(std::chrono::milliseconds::zero());  // rethrows its failure
  } catch (...) {
    // A failed collective on CUDA tensors: the GPU may still be stopping it (GIL held again).
    if (work != nullptr && work->buffersInUse())
      abandon(std::move(work), keepAlive());
    throw;
  }
  if (done) {
    // A collective on CUDA tensors is done for the caller once its stream is ordered after it,
    // while the GPU may still be running it: its memory lives on until the GPU has finished.
    if (work->buffersInUse())
      abandon(std::move(work), keepAlive());
    return py::none();
  }
  return finishOperation(std::move(work), keepAlive(), async);  // waits in slices if blocking
}
// Waits (GIL released) for every abandoned operation, then drops their references.
void drainAbandonedWork();

}  // namespace chorus::python
