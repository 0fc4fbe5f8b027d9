// The short paths of the uneven collectives (declared in short_calls.h): all_to_all with splits
// and allgather with uneven=True, on one NumPy array or torch CPU tensor. Each makes the same
// collectives as the package's general path (python/chorus/_uneven.py), through the same
// agreement (uneven_agreement.h), so that ranks on either path meet; and each declines (returns
// NotImplemented, before any communication) every call that path would treat otherwise: an
// argument it would refuse or read another way (splits that are not a list or tuple of exact ints,
// say), allgather along another axis than 0, and the padded exchange tests force on host arrays.
#include <pybind11/stl.h>

#include <limits>
#include <string>
#include <vector>

#include "short_arrays.h"
#include "short_calls.h"
#include "uneven_agreement.h"

namespace chorus::python {
namespace {

// `object` as `size` row counts: a list or tuple of exact ints in [0, kMostRows).
std::optional<std::vector<int64_t>> rowCounts(py::handle object, int size) {
  if (!PyList_CheckExact(object.ptr()) && !PyTuple_CheckExact(object.ptr()))
    return std::nullopt;
  const auto sequence = py::reinterpret_borrow<py::sequence>(object);
  if (static_cast<int>(sequence.size()) != size)
    return std::nullopt;
  std::vector<int64_t> counts;
  counts.reserve(static_cast<size_t>(size));
  for (const py::handle item : sequence) {
    const auto count = exactInt(item);
    if (!count || *count < 0 || *count >= kMostRows)
      return std::nullopt;
    counts.push_back(*count);
  }
  return counts;
}

// Whether tests have sent host rows through the padded exchange of CUDA rows
// (_uneven._PADDED_ON_HOST), which only the general path makes. Read from sys.modules, without an
// import (which could release the GIL to another thread's first call): a module not yet imported
// has had no flag set.
bool paddedOnHost() {
  static PyObject* const name = PyUnicode_InternFromString("chorus._uneven");
  const auto module = py::reinterpret_steal<py::object>(PyImport_GetModule(name));
  if (!module) {
    if (PyErr_Occurred() == nullptr)
      return false;
    PyErr_Clear();
    return true;
  }
  const auto flag =
      py::reinterpret_steal<py::object>(PyObject_GetAttrString(module.ptr(), "_PADDED_ON_HOST"));
  if (!flag) {
    PyErr_Clear();
    return true;
  }
  return flag.ptr() != Py_False;
}

// The sum of `counts`, or nullopt past `most` (then the sum may not fit an int64).
std::optional<int64_t> sumUpTo(std::span<const int64_t> counts, int64_t most) {
  int64_t sum = 0;
  for (const int64_t count : counts) {
    if (count > most - sum)
      return std::nullopt;
    sum += count;
  }
  return sum;
}

// The extents of `input` with dimension 0 replaced by `rows`.
Extents withRows(const Tensor& input, int64_t rows) {
  Extents extents(input.shape());
  extents[0] = rows;
  return extents;
}

// Runs `issue(output)` into a new array like x of `extents`; returns what `wrap(array)` makes of
// the result (or a Work of it).
template <typename Issue, typename Wrap>
py::object intoNewArray(const Tensor& input,
                        const ShortCall& call,
                        std::span<const int64_t> extents,
                        Issue issue,
                        Wrap wrap) {
  py::object array;
  const auto output = outputFor(input, call.x, py::none(), extents, array);
  if (!output)
    throw InternalError("the uneven short path could not make its result");
  py::object pending = runOperation(
      call.async, [&] { return issue(*output); }, [&] { return py::make_tuple(call.x, array); });
  py::object result = wrap(std::move(array));
  return call.async ? asyncWork(std::move(pending), std::move(result)) : result;
}

}  // namespace

py::object allToAllUnevenShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  if (!input || input->dim() == 0 || !call.out.is_none() || paddedOnHost())
    return notImplemented();
  const auto sends = rowCounts(call.arguments[0], comm.size());
  std::optional<std::vector<int64_t>> expects;
  if (!call.arguments[1].is_none())
    expects = rowCounts(call.arguments[1], comm.size());
  if (!sends || (!call.arguments[1].is_none() && !expects) ||
      sumUpTo(*sends, input->shape()[0]) != input->shape()[0])
    return notImplemented();
  const int64_t signature = rowsSignature(toString(input->dtype()), input->shape(), false);
  const auto agreed = agreeOnRows(comm, &*sends, expects ? &*expects : nullptr, signature, false);
  if (!agreed)
    throw InternalError("all_to_all: the uneven short path refused a call it had taken");
  const auto& arrives = agreed->arrives;
  const auto rows = sumUpTo(arrives, std::numeric_limits<int64_t>::max());
  if (!rows)
    throw InvalidArgumentError(
        "all_to_all: the rows the ranks send this rank add up to more than "
        "an array can hold");
  return intoNewArray(
      *input, call, withRows(*input, *rows),
      [&](const Tensor& output) { return comm.allToAllV(*input, *sends, output, arrives); },
      [&](py::object array) { return py::make_tuple(std::move(array), py::cast(arrives)); });
}

py::object allgatherUnevenShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  if (!input || input->dim() == 0 || call.arguments[1].ptr() != Py_True || !call.out.is_none() ||
      paddedOnHost())
    return notImplemented();
  const auto axis = axisIn(call.arguments[0], input->dim());
  if (axis != 0)
    return notImplemented();  // other axes gather padded blocks: the general path's
  const int64_t signature = extentsSignature(toString(input->dtype()), input->shape(), 0, false);
  const auto extents = agreeOnExtents(comm, input->shape()[0], signature, 0);
  if (!extents)
    throw InternalError("allgather: the uneven short path refused a call it had taken");
  const auto rows = sumUpTo(*extents, std::numeric_limits<int64_t>::max());
  if (!rows)
    throw InvalidArgumentError("allgather: the ranks' rows add up to more than an array can hold");
  const bool even = std::all_of(extents->begin(), extents->end(),
                                [&](int64_t extent) { return extent == extents->front(); });
  return intoNewArray(
      *input, call, withRows(*input, *rows),
      [&](const Tensor& output) {
        return even ? comm.allgather(*input, output, 0) : comm.allgatherV(*input, output, *extents);
      },
      [](py::object array) { return array; });
}

}  // namespace chorus::python
