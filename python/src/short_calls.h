// The short paths of the commonest calls from Python (short_calls.cc): a blocking operation of one
// NumPy array or torch CPU tensor on `comm` (the world), with no pybind11 dispatch, no DLPack
// capsule and no heap allocation once warm but the result. Each returns the result, or
// NotImplemented for a call it does not take (another array type, a strided, misaligned,
// byte-swapped or read-only output, an op that is not a ReduceOp's name or that the dtype does not
// take, a root or axis that is not an int in range, different dtypes or shapes), which the
// package's general path then handles. Errors of the operation itself are C++ exceptions, as from
// any binding.
#pragma once

#include "bindings.h"

namespace chorus::python {

// allreduce of `x` with the op named `op` ("sum", ...), into `out`, or a new array if `out` is
// None.
py::object allreduceArray(Communicator& comm, py::handle x, py::handle out, py::handle op);
// broadcast of `x` from rank `root`, into `out`, or a new array if `out` is None.
py::object broadcastArray(Communicator& comm, py::handle x, py::handle out, py::handle root);
// allgather of `x` along `axis`, into `out`, or a new array if `out` is None.
py::object allgatherArray(Communicator& comm, py::handle x, py::handle out, py::handle axis);
// A blocking barrier; returns None.
py::object barrierWorld(Communicator& comm);

// Sets the Python error for the C++ exception being handled, as pybind11's dispatcher does
// (through the translators errors.cc registered); returns null, for a CPython function to return.
PyObject* setPythonError() noexcept;

}  // namespace chorus::python
