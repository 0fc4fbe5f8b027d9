// See torch_view.h. torch's objects (the Tensor type, its dtypes, torch.strided, torch.empty) are
// looked up once, the first time a call finds torch imported, and kept for the life of the process.
#include "torch_view.h"

#include <array>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::python {
namespace {

constexpr int kMostDims = 64;

struct TorchObjects {
  PyTypeObject* tensorType = nullptr;
  PyObject* strided = nullptr;
  PyObject* empty = nullptr;
  std::vector<std::pair<PyObject*, DataType>> dtypes;  // torch.float32 -> kFloat32, ...
};

PyObject* interned(const char* name) {
  PyObject* string = PyUnicode_InternFromString(name);
  if (string == nullptr)
    throw py::error_already_set();
  return string;
}

// torch's objects, looked up in the imported module `torch`; throws py::error_already_set when a
// lookup fails (a partly imported torch). Kept for the life of the process, like torch itself.
const TorchObjects* lookUp(const py::object& torch) {
  auto objects = std::make_unique<TorchObjects>();
  auto keep = [&](const char* name) { return py::object(torch.attr(name)).release().ptr(); };
  objects->tensorType = reinterpret_cast<PyTypeObject*>(keep("Tensor"));
  objects->strided = keep("strided");
  objects->empty = keep("empty");
  for (int i = 0; i < kNumDataTypes; ++i) {  // torch names its dtypes as chorus does
    const auto dtype = static_cast<DataType>(i);
    const std::string dtypeName(toString(dtype));
    if (py::hasattr(torch, dtypeName.c_str()))  // torch < 2.3 has no uint16, uint32, uint64
      objects->dtypes.emplace_back(keep(dtypeName.c_str()), dtype);
  }
  return objects.release();
}

// torch's objects, or null while torch is not imported, is blocked (sys.modules["torch"] = None)
// or is only partly imported (a lookup fails). Never imports it.
const TorchObjects* torchObjects() {
  static const TorchObjects* found = nullptr;
  if (found != nullptr)
    return found;
  static PyObject* const name = interned("torch");
  PyObject* module = PyImport_GetModule(name);  // new reference, or null when not imported
  if (module == nullptr || !PyModule_Check(module)) {
    Py_XDECREF(module);
    PyErr_Clear();
    return nullptr;
  }
  const py::object torch = py::reinterpret_steal<py::object>(module);
  try {
    found = lookUp(torch);
  } catch (const py::error_already_set&) {
    PyErr_Clear();  // not usable (yet): the general path handles torch tensors
  }
  return found;
}

py::object attribute(py::handle object, PyObject* name) {
  PyObject* value = PyObject_GetAttr(object.ptr(), name);
  if (value == nullptr)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

py::object callMethod(py::handle object, PyObject* name) {
  PyObject* value = PyObject_CallMethodNoArgs(object.ptr(), name);
  if (value == nullptr)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

bool isTrue(const py::object& value) { return value.ptr() == Py_True; }

std::optional<DataType> dataTypeOf(const TorchObjects& torch, py::handle dtype) {
  for (const auto& [object, type] : torch.dtypes) {
    if (dtype.ptr() == object)
      return type;
  }
  return std::nullopt;
}

}  // namespace

bool isTorchTensor(py::handle object) {
  const TorchObjects* torch = torchObjects();
  return torch != nullptr && Py_TYPE(object.ptr()) == torch->tensorType;
}

std::optional<Tensor> torchTensor(py::handle object, bool shaped) {
  if (!isTorchTensor(object))
    return std::nullopt;
  const TorchObjects& torch = *torchObjects();
  static PyObject* const isCpu = interned("is_cpu");
  static PyObject* const layout = interned("layout");
  static PyObject* const dtypeName = interned("dtype");
  static PyObject* const shapeName = interned("shape");
  static PyObject* const isContiguous = interned("is_contiguous");
  static PyObject* const isNeg = interned("is_neg");
  static PyObject* const isConj = interned("is_conj");
  static PyObject* const dataPtr = interned("data_ptr");
  if (!isTrue(attribute(object, isCpu)) || attribute(object, layout).ptr() != torch.strided)
    return std::nullopt;
  const auto dtype = dataTypeOf(torch, attribute(object, dtypeName));
  // A lazy negation or conjugation (x.conj()) holds values other than those it reads as.
  if (!dtype || !isTrue(callMethod(object, isContiguous)) || isTrue(callMethod(object, isNeg)) ||
      (isComplex(*dtype) && isTrue(callMethod(object, isConj))))
    return std::nullopt;
  void* data = PyLong_AsVoidPtr(callMethod(object, dataPtr).ptr());
  if (data == nullptr && PyErr_Occurred())
    throw py::error_already_set();
  const py::object shape = attribute(object, shapeName);  // a torch.Size: a tuple of ints
  const Py_ssize_t dims = PyTuple_GET_SIZE(shape.ptr());
  if (dims > kMostDims)
    return std::nullopt;
  std::array<int64_t, kMostDims> extents{};
  int64_t count = 1;
  for (Py_ssize_t d = 0; d < dims; ++d) {
    extents[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), d));
    count *= extents[d];
  }
  if (PyErr_Occurred())
    throw py::error_already_set();
  if (shaped)
    return Tensor(data, *dtype,
                  std::span<const int64_t>(extents.data(), static_cast<size_t>(dims)));
  return Tensor(data, *dtype, {count});
}

py::object emptyTorchLike(py::handle like, std::span<const int64_t> extents) {
  const TorchObjects& torch = *torchObjects();
  py::tuple shape(extents.size());
  for (size_t d = 0; d < extents.size(); ++d) shape[d] = py::int_(extents[d]);
  py::dict options;  // a CPU tensor like `like`, whatever torch's default device
  options["dtype"] = like.attr("dtype");
  options["device"] = like.attr("device");
  return py::reinterpret_borrow<py::object>(torch.empty)(shape, **options);
}

}  // namespace chorus::python
