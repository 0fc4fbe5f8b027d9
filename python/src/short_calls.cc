// The short paths for the most common calls from Python, each a CPython function (METH_FASTCALL,
// no pybind11 dispatch) that allocates nothing on the heap once warm but its result. They run
// their operation as operations.cc does (runOperation), on the arguments the user gave:
//  - barrier_world(native): a blocking barrier of the world;
//  - allreduce_array(native, x, out, op): a blocking allreduce of one NumPy array, into a new array
//    or the caller's `out`. `op` is the user's op name, looked up here in _chorus.ReduceOp's
//    members as the package's general path looks it up, so the package passes it on untouched.
//    It reads the arrays' fields directly (pybind11's view of NumPy's structs: data, dimensions,
//    flags, descr->type_num), allocates a new result with NumPy's C API, and issues
//    Communicator::allreduce(input, output) under BlockingCalls, all in one GIL release. No DLPack
//    capsule, no Python-level wrapping.
//
// Anything else (another array type, a strided, misaligned, byte-swapped or read-only output, an
// op that is not a ReduceOp's name or that the dtype does not take, different dtypes or sizes)
// returns NotImplemented, and the package takes its general path, which handles it or raises the
// error users see there (C++'s checks). So this path adds speed and changes no behaviour.
#include <pybind11/numpy.h>

#include <optional>
#include <typeinfo>

#include "bindings.h"

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

// A flat Tensor over `object` when it is exactly a NumPy ndarray (not a subclass) that is
// C-contiguous, aligned, in native byte order, of a chorus dtype, and writable if `writable`.
std::optional<Tensor> flatArray(py::handle object, bool writable) {
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
  int64_t count = 1;
  for (int d = 0; d < array->nd; ++d) count *= array->dimensions[d];
  return Tensor(array->data, *dtype, {count});
}

// The ReduceOp that `op` names ("sum", ...), looked up in _chorus.ReduceOp.__members__ (bound in
// operations.cc) and read straight from the enum instance found there; nullopt for anything else.
std::optional<ReduceOp> reduceOpOf(py::handle op) {
  static const py::detail::type_info* const type = py::detail::get_type_info(typeid(ReduceOp));
  static PyObject* const members =  // kept for the life of the process, like the module
      py::object(py::type::of<ReduceOp>().attr("__members__")).release().ptr();
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

// A new C-contiguous ndarray of `like`'s dtype and shape.
py::object emptyLike(py::handle like) {
  const auto& api = npy_api::get();
  const auto* array = array_proxy(like.ptr());
  Py_INCREF(array->descr);  // PyArray_NewFromDescr steals it
  PyObject* result = api.PyArray_NewFromDescr_(api.PyArray_Type_, array->descr, array->nd,
                                               array->dimensions, nullptr, nullptr, 0, nullptr);
  if (result == nullptr)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

py::object allreduceArray(Communicator& comm, py::handle x, py::handle out, py::handle op) {
  const auto input = flatArray(x, false);
  const auto reduceOp = reduceOpOf(op);
  if (!input || !reduceOp || !isValidReduction(*reduceOp, input->dtype()))
    return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  py::object result;
  std::optional<Tensor> output;
  if (out.is_none()) {
    result = emptyLike(x);
    output = flatArray(result, true);
    adviseHugePagesIfLarge(*output);
  } else {
    output = flatArray(out, true);
    if (!output || output->dtype() != input->dtype() || output->numel() != input->numel())
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    result = py::reinterpret_borrow<py::object>(out);
  }
  runOperation(
      false, [&] { return comm.allreduce(*input, *output, *reduceOp); },
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

// allreduce_array(native, x, out, op) as CPython calls it (METH_FASTCALL): pybind11's dispatcher
// would add two vector allocations and its overload resolution to every call. Exceptions become
// Python's through the translators pybind11 registered (errors.cc), as in its dispatcher.
PyObject* allreduceArrayCall(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  try {
    if (nargs != 4)
      throw py::type_error("allreduce_array(native, x, out, op) takes 4 arguments");
    auto& comm = py::cast<Communicator&>(py::handle(args[0]));
    return allreduceArray(comm, args[1], args[2], args[3]).release().ptr();
  } catch (...) {
    return setPythonError();
  }
}

// barrier_world(native): a blocking barrier of the world, as CPython calls it (METH_FASTCALL).
PyObject* barrierWorldCall(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  try {
    if (nargs != 1)
      throw py::type_error("barrier_world(native) takes 1 argument");
    auto& comm = py::cast<Communicator&>(py::handle(args[0]));
    return runOperation(
               false, [&] { return comm.barrier(); }, [] { return py::none(); })
        .release()
        .ptr();
  } catch (...) {
    return setPythonError();
  }
}

PyMethodDef barrierWorldMethod = {
    "barrier_world", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(barrierWorldCall)),
    METH_FASTCALL, "barrier_world(native): a blocking barrier of the world communicator"};

PyMethodDef allreduceArrayMethod = {
    "allreduce_array",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allreduceArrayCall)), METH_FASTCALL,
    "allreduce_array(native, x, out, op): allreduce for one NumPy array, blocking; "
    "NotImplemented when the call needs the package's general path"};

}  // namespace

void bindShortCalls(py::module_& module) {
  for (PyMethodDef* method : {&allreduceArrayMethod, &barrierWorldMethod}) {
    PyObject* function = PyCFunction_NewEx(method, nullptr, nullptr);
    if (function == nullptr)
      throw py::error_already_set();
    module.attr(method->ml_name) = py::reinterpret_steal<py::object>(function);
  }
}

}  // namespace chorus::python
