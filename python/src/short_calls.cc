// The short paths for the most common calls from Python (declared in short_calls.h), and the
// same as CPython functions (METH_FASTCALL, no pybind11 dispatch) that allocate nothing on the heap
// once warm but their result. The package's fronts (front_calls.cc) call the C++ functions; the
// CPython ones are there for tests and for callers that hold a Communicator:
//  - barrier_world(native): a blocking barrier of the world;
//  - allreduce_array(native, x, out, op): a blocking allreduce of one NumPy array or torch CPU
//    tensor, into a new array of its framework or the caller's `out` (of the same framework). `op`
//    is the user's op name, looked up here in _chorus.ReduceOp's members as the package's general
//    path looks it up, so the user's value is passed on untouched;
//  - broadcast_array(native, x, out, root): a blocking broadcast of one NumPy array from world
//    rank `root`, into a new array or `out`;
//  - allgather_array(native, x, out, axis): a blocking allgather of one NumPy array along `axis`,
//    into a new array or `out`.
// Each reads the arrays' fields directly (pybind11's view of NumPy's structs: data, dimensions,
// flags, descr->type_num; a torch tensor through a few attribute reads, torch_view.h), allocates a
// new result with NumPy's C API (torch.empty for torch), and issues its Communicator
// method (input, output) under BlockingCalls, all in one GIL release. No DLPack capsule, no
// Python-level wrapping. `native` is the world's Communicator, so world ranks are its ranks.
//
// Anything else (another array type, a strided, misaligned, byte-swapped or read-only output, an
// op that is not a ReduceOp's name or that the dtype does not take, a root or axis that is not an
// int in range, different dtypes or shapes) returns NotImplemented, and the package takes its
// general path, which handles it or raises the error users see there (C++'s checks). So this path
// adds speed and changes no behaviour.
#include "short_calls.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <optional>
#include <span>
#include <typeinfo>

#include "torch_view.h"

namespace chorus::python {
namespace {

using pybind11::detail::array_descriptor_proxy;
using pybind11::detail::array_proxy;
using pybind11::detail::npy_api;

constexpr int kNpyHalf = 23;  // NPY_HALF (pybind11's npy_api does not name it)

std::optional<DataType> dataTypeOf(int typeNum) {
  switch (typeNum) {
    case npy_api::NPY_BOOL_:
      return DataType::kBool;
    case npy_api::NPY_INT8_:
      return DataType::kInt8;
    case npy_api::NPY_UINT8_:
      return DataType::kUInt8;
    case npy_api::NPY_INT_:
      return DataType::kInt32;
    case npy_api::NPY_LONG_:
      return sizeof(long) == 8 ? DataType::kInt64 : DataType::kInt32;
    case npy_api::NPY_LONGLONG_:
      return DataType::kInt64;
    case npy_api::NPY_FLOAT_:
      return DataType::kFloat32;
    case npy_api::NPY_DOUBLE_:
      return DataType::kFloat64;
    case kNpyHalf:
      return DataType::kFloat16;
    default:
      return std::nullopt;
  }
}

// A Tensor over `object` when it is exactly a NumPy ndarray (not a subclass) that is C-contiguous,
// aligned, in native byte order, of a chorus dtype, and writable if `writable`: flat (one
// dimension), or of the array's shape if `shaped`.
std::optional<Tensor> arrayTensor(py::handle object, bool writable, bool shaped = false) {
  const auto& api = npy_api::get();
  if (Py_TYPE(object.ptr()) != api.PyArray_Type_)
    return std::nullopt;
  const auto* array = array_proxy(object.ptr());
  int required = npy_api::NPY_ARRAY_C_CONTIGUOUS_ | npy_api::NPY_ARRAY_ALIGNED_;
  if (writable)
    required |= npy_api::NPY_ARRAY_WRITEABLE_;
  if ((array->flags & required) != required)
    return std::nullopt;
  const auto* descr = array_descriptor_proxy(array->descr);
  const auto dtype = dataTypeOf(descr->type_num);
  if (!dtype || descr->byteorder == '>')
    return std::nullopt;
  static_assert(sizeof(Py_intptr_t) == sizeof(int64_t), "NumPy's extents are 64-bit here");
  const std::span<const int64_t> extents(reinterpret_cast<const int64_t*>(array->dimensions),
                                         static_cast<size_t>(array->nd));
  if (shaped)
    return Tensor(array->data, *dtype, extents);
  int64_t count = 1;
  for (const int64_t extent : extents) count *= extent;
  return Tensor(array->data, *dtype, {count});
}

// `object` as the input of a short call: a NumPy array (arrayTensor) or a torch tensor
// (torchTensor), flat or `shaped`.
std::optional<Tensor> operandTensor(py::handle object, bool shaped = false) {
  if (auto array = arrayTensor(object, false, shaped))
    return array;
  return torchTensor(object, shaped);
}

py::object notImplemented() { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }

// `object` as an int when it is exactly a Python int (not a bool, not an int subclass) that fits.
std::optional<long> exactInt(py::handle object) {
  if (!PyLong_CheckExact(object.ptr()))
    return std::nullopt;
  int overflow = 0;
  const long value = PyLong_AsLongAndOverflow(object.ptr(), &overflow);
  if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return std::nullopt;
  }
  return value;
}

// The ReduceOp that `op` names ("sum", ...), looked up in _chorus.ReduceOp.__members__ (bound in
// operations.cc) and read straight from the enum instance found there; nullopt for anything else.
std::optional<ReduceOp> reduceOpOf(py::handle op) {
  static const py::detail::type_info* const type = py::detail::get_type_info(typeid(ReduceOp));
  // (Through the type_info, not py::type::of<ReduceOp>: pybind11 3 casts enums with a caster of
  // their own, which py::type::of refuses at compile time.)
  static PyObject* const members =  // kept for the life of the process, like the module
      py::object(py::handle(reinterpret_cast<PyObject*>(type->type)).attr("__members__"))
          .release()
          .ptr();
  if (!PyUnicode_Check(op.ptr()))
    return std::nullopt;
  PyObject* found = PyDict_GetItemWithError(members, op.ptr());  // borrowed
  if (found == nullptr || Py_TYPE(found) != type->type) {
    PyErr_Clear();
    return std::nullopt;
  }
  auto* instance = reinterpret_cast<py::detail::instance*>(found);
  return *static_cast<const ReduceOp*>(instance->get_value_and_holder(type).value_ptr());
}

// A new C-contiguous ndarray of `like`'s dtype, and of its shape with dimension `axis` (if any)
// multiplied by `factor`.
py::object emptyLike(py::handle like, int axis = -1, int64_t factor = 1) {
  const auto& api = npy_api::get();
  const auto* array = array_proxy(like.ptr());
  constexpr int kMostDims = 64;  // NPY_MAXDIMS of NumPy 2 (32 before)
  Py_intptr_t extents[kMostDims];
  std::copy_n(array->dimensions, std::min(array->nd, kMostDims), extents);
  if (axis >= 0)
    extents[axis] *= factor;
  Py_INCREF(array->descr);  // PyArray_NewFromDescr steals it
  PyObject* result = api.PyArray_NewFromDescr_(api.PyArray_Type_, array->descr, array->nd, extents,
                                               nullptr, nullptr, 0, nullptr);
  if (result == nullptr)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

// The output of a short call that writes a result like `x` (dimension `axis`, if any, multiplied
// by `factor`): a new array (`out` None), advised huge pages if large, or the caller's `out` when
// it is a writable array of x's dtype (its size C++ checks). Sets `result` to what the call
// returns; nullopt: the general path's business.
std::optional<Tensor> outputFor(const Tensor& input,
                                py::handle x,
                                py::handle out,
                                bool shaped,
                                py::object& result,
                                int axis = -1,
                                int64_t factor = 1) {
  const bool torch = isTorchTensor(x);  // the output's framework is x's
  if (out.is_none()) {
    result = torch ? emptyTorchLike(x, axis, factor) : emptyLike(x, axis, factor);
    auto output = torch ? torchTensor(result, shaped) : arrayTensor(result, true, shaped);
    if (output)
      adviseHugePagesIfLarge(*output);
    return output;
  }
  if (torch && out.ptr() == x.ptr()) {  // in place: the tensor was read as the input
    result = py::reinterpret_borrow<py::object>(out);
    return input;
  }
  auto output = torch ? torchTensor(out, shaped) : arrayTensor(out, true, shaped);
  if (!output || output->dtype() != input.dtype())
    return std::nullopt;
  result = py::reinterpret_borrow<py::object>(out);
  return output;
}

// Runs `call(output)` blocking (runOperation) for an operation whose result has x's size: into
// `out`, or a new array like `x`; NotImplemented when `out` does not fit.
template <typename Call>
py::object intoSameSize(const Tensor& input, py::handle x, py::handle out, Call call) {
  py::object result;
  const auto output = outputFor(input, x, out, false, result);
  if (!output || output->numel() != input.numel())
    return notImplemented();
  runOperation(
      false, [&] { return call(*output); }, [&] { return py::make_tuple(x, result); });
  return result;
}

}  // namespace

py::object allreduceArray(Communicator& comm, py::handle x, py::handle out, py::handle op) {
  const auto input = operandTensor(x);
  const auto reduceOp = reduceOpOf(op);
  if (!input || !reduceOp || !isValidReduction(*reduceOp, input->dtype()))
    return notImplemented();
  return intoSameSize(*input, x, out, [&](const Tensor& output) {
    return comm.allreduce(*input, output, *reduceOp);
  });
}

py::object broadcastArray(Communicator& comm, py::handle x, py::handle out, py::handle root) {
  const auto input = operandTensor(x);
  const auto rootRank = exactInt(root);
  if (!input || !rootRank || *rootRank < 0 || *rootRank >= comm.size())
    return notImplemented();
  return intoSameSize(*input, x, out, [&](const Tensor& output) {
    return comm.broadcast(*input, output, static_cast<int>(*rootRank));
  });
}

py::object allgatherArray(Communicator& comm, py::handle x, py::handle out, py::handle axis) {
  const auto input = operandTensor(x, true);
  const auto requested = exactInt(axis);
  if (!input || !requested || *requested < -input->dim() || *requested >= input->dim())
    return notImplemented();
  const int normalized = static_cast<int>(*requested < 0 ? *requested + input->dim() : *requested);
  py::object result;
  const auto output = outputFor(*input, x, out, true, result, normalized, comm.size());
  if (!output)
    return notImplemented();
  runOperation(
      false, [&] { return comm.allgather(*input, *output, normalized); },
      [&] { return py::make_tuple(x, result); });
  return result;
}

// Sets the Python error for the C++ exception being handled, as pybind11's dispatcher does (through
// the translators it registered, errors.cc); returns null for the caller to return to CPython.
PyObject* setPythonError() noexcept {
  try {
    throw;
  } catch (py::error_already_set& error) {
    error.restore();
  } catch (...) {
    if (!py::detail::apply_exception_translators(
            py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(
            py::detail::get_internals().registered_exception_translators)) {
      PyErr_SetString(PyExc_SystemError, "an exception escaped chorus's translators");
    }
  }
  return nullptr;
}

py::object barrierWorld(Communicator& comm) {
  return runOperation(
      false, [&] { return comm.barrier(); }, [] { return py::none(); });
}

namespace {

// `function(comm, x, out, argument)` as CPython calls it (METH_FASTCALL) with the four arguments
// (native, x, out, argument): pybind11's dispatcher would add two vector allocations and its
// overload resolution to every call. Exceptions become Python's through the translators pybind11
// registered (errors.cc), as in its dispatcher.
template <py::object (*function)(Communicator&, py::handle, py::handle, py::handle)>
PyObject* arrayCall(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  try {
    if (nargs != 4)
      throw py::type_error("a short call takes 4 arguments: (native, x, out, argument)");
    auto& comm = py::cast<Communicator&>(py::handle(args[0]));
    return function(comm, args[1], args[2], args[3]).release().ptr();
  } catch (...) {
    return setPythonError();
  }
}

// barrier_world(native): a blocking barrier of the world, as CPython calls it (METH_FASTCALL).
PyObject* barrierWorldCall(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  try {
    if (nargs != 1)
      throw py::type_error("barrier_world(native) takes 1 argument");
    return barrierWorld(py::cast<Communicator&>(py::handle(args[0]))).release().ptr();
  } catch (...) {
    return setPythonError();
  }
}

template <py::object (*function)(Communicator&, py::handle, py::handle, py::handle)>
PyMethodDef arrayMethod(const char* name, const char* doc) {
  return {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(arrayCall<function>)),
          METH_FASTCALL, doc};
}

PyMethodDef methods[] = {
    {"barrier_world", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(barrierWorldCall)),
     METH_FASTCALL, "barrier_world(native): a blocking barrier of the world communicator"},
    arrayMethod<allreduceArray>(
        "allreduce_array",
        "allreduce_array(native, x, out, op): allreduce of one NumPy array, blocking; "
        "NotImplemented when the call needs the package's general path"),
    arrayMethod<broadcastArray>(
        "broadcast_array",
        "broadcast_array(native, x, out, root): broadcast of one NumPy array, blocking; "
        "NotImplemented when the call needs the package's general path"),
    arrayMethod<allgatherArray>(
        "allgather_array",
        "allgather_array(native, x, out, axis): allgather of one NumPy array, blocking; "
        "NotImplemented when the call needs the package's general path"),
};

}  // namespace

void bindShortCalls(py::module_& module) {
  for (PyMethodDef& method : methods) {
    PyObject* function = PyCFunction_NewEx(&method, nullptr, nullptr);
    if (function == nullptr)
      throw py::error_already_set();
    module.attr(method.ml_name) = py::reinterpret_steal<py::object>(function);
  }
}

}  // namespace chorus::python
