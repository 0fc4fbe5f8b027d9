// The short paths of send and recv (declared in short_calls.h); see short_calls.cc for the rest.
// As the package's general path (python/chorus/_ops.py): send returns None; recv returns `out`,
// or a new NumPy array of `shape` and `dtype` when out is None. A peer that is not a rank of the
// world (ANY_SOURCE included, whose recv learns its sender), a negative tag, a shape that is not an
// int or a tuple or list of ints, and a dtype that is not the name of a NumPy dtype chorus takes
// ("float32", ...) leave the call to the general path.
#include <array>
#include <limits>
#include <optional>
#include <span>

#include "short_arrays.h"
#include "short_calls.h"

namespace chorus::python {
namespace {

std::optional<int> tagOf(py::handle tag) {
  const auto value = exactInt(tag);
  if (!value || *value < 0 || *value > std::numeric_limits<int>::max())
    return std::nullopt;
  return static_cast<int>(*value);
}

// recv's `shape` (an int, or a tuple or list of ints, none negative) as extents.
std::optional<Extents> extentsOf(py::handle shape) {
  if (const auto extent = exactInt(shape)) {
    if (*extent < 0)
      return std::nullopt;
    const int64_t only = *extent;
    return Extents(std::span<const int64_t>(&only, 1));
  }
  const bool tuple = PyTuple_CheckExact(shape.ptr());
  if (!tuple && !PyList_CheckExact(shape.ptr()))
    return std::nullopt;
  const Py_ssize_t dims = tuple ? PyTuple_GET_SIZE(shape.ptr()) : PyList_GET_SIZE(shape.ptr());
  std::array<int64_t, 64> extents{};
  if (dims > static_cast<Py_ssize_t>(extents.size()))
    return std::nullopt;
  for (Py_ssize_t d = 0; d < dims; ++d) {
    PyObject* item = tuple ? PyTuple_GET_ITEM(shape.ptr(), d) : PyList_GET_ITEM(shape.ptr(), d);
    const auto extent = exactInt(item);
    if (!extent || *extent < 0)
      return std::nullopt;
    extents[static_cast<size_t>(d)] = *extent;
  }
  return Extents(std::span<const int64_t>(extents.data(), static_cast<size_t>(dims)));
}

}  // namespace

py::object sendShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto peer = rankIn(call.arguments[0], comm.size());
  const auto tag = tagOf(call.arguments[1]);
  if (!input || !peer || !tag)
    return notImplemented();
  py::object pending = runOperation(
      call.async, [&] { return comm.send(*input, *peer, *tag); },
      [&] { return py::reinterpret_borrow<py::object>(call.x); });
  return call.async ? asyncWork(std::move(pending), py::none()) : pending;
}

py::object recvShort(Communicator& comm, const ShortCall& call) {
  const auto peer = rankIn(call.arguments[0], comm.size());
  const auto tag = tagOf(call.arguments[1]);
  if (!peer || !tag)
    return notImplemented();
  py::object result;
  std::optional<Tensor> output;
  if (!call.out.is_none()) {
    result = py::reinterpret_borrow<py::object>(call.out);
    output = writableTensor(call.out);
  } else {
    const auto extents = extentsOf(call.arguments[2]);
    const auto typeNum = numpyTypeOf(call.arguments[3]);
    if (!extents || !typeNum)
      return notImplemented();
    result = newArray(*typeNum, *extents);
    output = writableTensor(result);
  }
  if (!output)
    return notImplemented();
  py::object pending = runOperation(
      call.async, [&] { return comm.recv(*output, *peer, *tag); }, [&] { return result; });
  return call.async ? asyncWork(std::move(pending), std::move(result)) : result;
}

}  // namespace chorus::python
