// The short paths of the commonest calls from Python (short_calls.cc, short_point_to_point.cc):
// an operation of one NumPy array or torch CPU tensor on `comm` (the world), with no
// pybind11 dispatch, no DLPack capsule and no heap allocation once warm but the result. Every
// operation has one: allreduce, broadcast, reduce, allgather, reduce_scatter, gather, scatter,
// all_to_all, send, recv and barrier.
//
// Each returns the result (async: a chorus.Work whose wait() returns it), or NotImplemented for a
// call it does not take (another array type; a strided, misaligned, byte-swapped or read-only
// output; an op that is not a ReduceOp's name or that the dtype does not take; a root, peer, tag or
// axis that is not an int in range; different dtypes or sizes; an extent that does not divide),
// which the package's general path then handles, raising the error users see there. Errors of the
// operation itself are C++ exceptions, as from any binding. So a short path adds speed and changes
// no behaviour.
//
// all_to_all and allgather have a second short path each, their variant, for the uneven forms:
// all_to_all with splits (and recv_splits) and allgather with uneven=True (short_uneven.cc), taken
// when the variant's switch (splits, uneven) is not at its default.
//
// The package's fronts (front_calls.cc) find an operation's short paths by its name; each is also
// a CPython function of the module, `<direct>(native, [x,] [out,] arguments...)` (allreduce_array,
// ..., all_to_all_splits_array, allgather_uneven_array; the barrier's is `barrier_world(native)`),
// for tests and for callers that hold a Communicator.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "bindings.h"

namespace chorus::python {

inline constexpr size_t kMostShortArguments = 4;

// The arguments of one short call, as the caller gave them.
struct ShortCall {
  py::handle x;    // the input (None for recv and barrier)
  py::handle out;  // the output: the caller's array, x itself (in place), or None for a new one
  std::array<py::handle, kMostShortArguments> arguments;  // ShortOperation::arguments, in order
  // async_op=True: the path issues the operation without waiting and returns asyncWork(...) of its
  // result; a path whose result needs work after the operation (reduce's copy of x on the other
  // ranks) declines it.
  bool async = false;
};

using ShortPath = py::object (*)(Communicator& comm, const ShortCall& call);

struct ShortOperation {
  const char* name;    // the package's function: "allreduce", ...
  const char* direct;  // the module's CPython function: "allreduce_array", ...
  ShortPath path;
  bool takesInput;   // reads the parameter x
  bool takesOutput;  // writes the parameter out (or a new array)
  // The names of the other parameters the path reads, in the order of ShortCall::arguments;
  // nullptr after the last.
  std::array<const char*, kMostShortArguments> arguments;
  // A variant's switch: the parameter whose value, when not its default, selects this path
  // instead of the operation's plain one; nullptr for a plain path.
  const char* switchedBy = nullptr;
};

// Every short path, plain ones and variants.
std::span<const ShortOperation> shortOperations();
// The plain short path of the package's function `name`, or nullptr when it has none.
const ShortOperation* findShortOperation(std::string_view name);
// The variant of `name`'s short path, or nullptr when it has none.
const ShortOperation* findShortVariant(std::string_view name);

// The paths, by operation (short_calls.cc: the collectives; short_point_to_point.cc: send, recv).
py::object allreduceShort(Communicator& comm, const ShortCall& call);      // (op)
py::object broadcastShort(Communicator& comm, const ShortCall& call);      // (root)
py::object reduceShort(Communicator& comm, const ShortCall& call);         // (root, op)
py::object allgatherShort(Communicator& comm, const ShortCall& call);      // (axis)
py::object reduceScatterShort(Communicator& comm, const ShortCall& call);  // (op)
py::object gatherShort(Communicator& comm, const ShortCall& call);         // (root, axis)
py::object scatterShort(Communicator& comm, const ShortCall& call);        // (root)
py::object allToAllShort(Communicator& comm, const ShortCall& call);       // (split, concat)
py::object barrierShort(Communicator& comm, const ShortCall& call);        // ()
py::object sendShort(Communicator& comm, const ShortCall& call);           // (peer, tag)
py::object recvShort(Communicator& comm, const ShortCall& call);  // (peer, tag, shape, dtype)
// The variants (short_uneven.cc).
py::object allToAllUnevenShort(Communicator& comm, const ShortCall& call);  // (splits, recv_splits)
py::object allgatherUnevenShort(Communicator& comm, const ShortCall& call);  // (axis, uneven)

// The package's Work (python/chorus/_ops.py, registered with _chorus.set_work_type) of an async
// short call: `pending`, the PendingWork that runOperation returned, and `result`, what its wait()
// returns once the operation has completed.
py::object asyncWork(py::object pending, py::object result);

// Sets the Python error for the C++ exception being handled, as pybind11's dispatcher does
// (through the translators errors.cc registered); returns null, for a CPython function to return.
PyObject* setPythonError() noexcept;

}  // namespace chorus::python
