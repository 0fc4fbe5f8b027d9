// See short_arrays.h. NumPy arrays are read through pybind11's view of NumPy's structs (data,
// dimensions, flags, descr->type_num) and made with NumPy's C API; torch tensors through
// torch_view.h.
#include "short_arrays.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <typeinfo>

#include "torch_view.h"

namespace chorus::python {
namespace {

using pybind11::detail::array_descriptor_proxy;
using pybind11::detail::array_proxy;
using pybind11::detail::npy_api;

constexpr int kNpyHalf = 23;   // NPY_HALF (pybind11's npy_api does not name it)
constexpr int kMostDims = 64;  // NPY_MAXDIMS of NumPy 2 (32 before)

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
    case npy_api::NPY_SHORT_:
      return DataType::kInt16;
    case npy_api::NPY_USHORT_:
      return DataType::kUInt16;
    case npy_api::NPY_UINT_:
      return DataType::kUInt32;
    case npy_api::NPY_ULONG_:
      return sizeof(unsigned long) == 8 ? DataType::kUInt64 : DataType::kUInt32;
    case npy_api::NPY_ULONGLONG_:
      return DataType::kUInt64;
    case npy_api::NPY_CFLOAT_:
      return DataType::kComplex64;
    case npy_api::NPY_CDOUBLE_:
      return DataType::kComplex128;
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
std::optional<Tensor> arrayTensor(py::handle object, bool writable, bool shaped) {
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

// A new C-contiguous ndarray of NumPy descriptor `descr` (a new reference is taken) and `extents`.
py::object arrayOf(PyObject* descr, std::span<const int64_t> extents) {
  const auto& api = npy_api::get();
  if (extents.size() > kMostDims)
    throw py::value_error("an array of more than 64 dimensions");
  std::array<Py_intptr_t, kMostDims> dims{};
  std::copy(extents.begin(), extents.end(), dims.begin());
  Py_INCREF(descr);  // PyArray_NewFromDescr steals it
  PyObject* result =
      api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, static_cast<int>(extents.size()),
                                dims.data(), nullptr, nullptr, 0, nullptr);
  if (result == nullptr)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

}  // namespace

std::optional<Tensor> inputTensor(py::handle x, bool shaped) {
  if (auto array = arrayTensor(x, false, shaped))
    return array;
  return torchTensor(x, shaped);
}

std::optional<Tensor> writableTensor(py::handle out) {
  if (auto array = arrayTensor(out, true, true))
    return array;
  return torchTensor(out, true);
}

std::optional<Tensor> outputFor(const Tensor& input,
                                py::handle x,
                                py::handle out,
                                std::span<const int64_t> extents,
                                py::object& result) {
  const bool torch = isTorchTensor(x);  // the output's framework is x's
  if (out.is_none()) {
    result = torch ? emptyTorchLike(x, extents) : arrayOf(array_proxy(x.ptr())->descr, extents);
    auto output = torch ? torchTensor(result, true) : arrayTensor(result, true, true);
    if (output)
      adviseHugePagesIfLarge(*output);
    return output;
  }
  if (torch && out.ptr() == x.ptr()) {  // in place: the tensor was read as the input
    result = py::reinterpret_borrow<py::object>(out);
    return input;
  }
  auto output = torch ? torchTensor(out, true) : arrayTensor(out, true, true);
  if (!output || output->dtype() != input.dtype())
    return std::nullopt;
  result = py::reinterpret_borrow<py::object>(out);
  return output;
}

Extents::Extents(std::span<const int64_t> extents) : count_(extents.size()) {
  if (extents.size() > values_.size())
    throw py::value_error("an array of more than 64 dimensions");
  std::copy(extents.begin(), extents.end(), values_.begin());
}

Extents scaledExtents(const Tensor& input, int axis, int64_t multiply, int64_t divide) {
  Extents extents(input.shape());
  extents[static_cast<size_t>(axis)] = extents[static_cast<size_t>(axis)] * multiply / divide;
  return extents;
}

py::object newArray(int typeNum, std::span<const int64_t> extents) {
  PyObject* descr = npy_api::get().PyArray_DescrFromType_(typeNum);
  if (descr == nullptr)
    throw py::error_already_set();
  py::object owned = py::reinterpret_steal<py::object>(descr);
  return arrayOf(descr, extents);
}

std::optional<int> numpyTypeOf(py::handle name) {
  static const std::array<std::pair<const char*, int>, 8> kNames = {{
      {"float32", npy_api::NPY_FLOAT_},
      {"float64", npy_api::NPY_DOUBLE_},
      {"float16", kNpyHalf},
      {"int32", npy_api::NPY_INT_},
      {"int64", sizeof(long) == 8 ? npy_api::NPY_LONG_ : npy_api::NPY_LONGLONG_},
      {"int8", npy_api::NPY_INT8_},
      {"uint8", npy_api::NPY_UINT8_},
      {"bool", npy_api::NPY_BOOL_},
  }};
  if (!PyUnicode_CheckExact(name.ptr()))
    return std::nullopt;
  for (const auto& [text, typeNum] : kNames) {
    if (PyUnicode_CompareWithASCIIString(name.ptr(), text) == 0)
      return typeNum;
  }
  return std::nullopt;
}

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

std::optional<int> rankIn(py::handle object, int size) {
  const auto value = exactInt(object);
  if (!value || *value < 0 || *value >= size)
    return std::nullopt;
  return static_cast<int>(*value);
}

std::optional<int> axisIn(py::handle object, int dims) {
  const auto value = exactInt(object);
  if (!value || *value < -dims || *value >= dims)
    return std::nullopt;
  return static_cast<int>(*value < 0 ? *value + dims : *value);
}

// Looked up in _chorus.ReduceOp.__members__ (bound in operations.cc) and read straight from the
// enum instance found there.
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

py::object notImplemented() { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }

}  // namespace chorus::python
