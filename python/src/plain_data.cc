// encode_plain and decode_plain: the object collectives' plain-data format (chorus/_plain_data.py
// describes it and says why nothing is pickled) in C++. The Python walk cost 4-150 us for objects
// that pickle handles in 0.2-3 us, most of it in building each value's path for an error message
// that is almost never raised; here the path is kept as a stack and spelled out only on error.
//
// This file walks the containers and the scalar values. Arrays and tensors (tags 'a', 'g', 'p')
// are the leaves that Python describes and builds: `leaf(obj)` returns (tag, dtype name, shape,
// values buffer), None for an object that does not travel, or a str saying why one of its types
// does not ("a NumPy array of dtype <U4, ..."); `leaf(tag, dtype name, shape,
// values)` builds the object back, and must copy the values (they view the payload).
#include <Python.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "bindings.h"

namespace chorus::python {
namespace {

static_assert(std::endian::native == std::endian::little, "the format is little-endian");

constexpr int kMaxDepth = 100;     // _plain_data.MAX_DEPTH
constexpr uint64_t kMaxDims = 64;  // an array's dimensions (NumPy's own limit)
constexpr char kWhatTravels[] =
    "None, bool, int, float, complex, str, bytes, list, tuple, dict, NumPy arrays and scalars, "
    "and torch tensors";

// One step of the way from the whole object to the value being encoded, for error messages.
struct PathStep {
  enum Kind { kIndex, kKey, kKeyOf } kind;
  Py_ssize_t index = 0;
  PyObject* key = nullptr;  // borrowed: the encoder holds a reference while the step is live
};

// The value's path as the messages spell it: "the object", "the object[2]['k']", "a key of ...".
std::string spellPath(const std::vector<PathStep>& path) {
  std::string text = "the object";
  for (const PathStep& step : path) {
    if (step.kind == PathStep::kIndex) {
      text += "[" + std::to_string(step.index) + "]";
    } else if (step.kind == PathStep::kKeyOf) {
      text = "a key of " + text;
    } else {
      py::str repr = py::repr(step.key);
      text += "[" + repr.cast<std::string>() + "]";
    }
  }
  return text;
}

// Appends to a bytearray that grows by doubling, so the values of an array are copied once.
class Writer {
 public:
  explicit Writer(py::bytes prefix) {
    const std::string_view head = prefix;
    out_ = py::reinterpret_steal<py::object>(PyByteArray_FromStringAndSize(nullptr, 256));
    if (!out_)
      throw py::error_already_set();
    put(head.data(), head.size());
  }

  void put(const void* data, size_t size) {
    if (used_ + size > capacity()) {
      const size_t wanted = std::max(2 * capacity(), used_ + size);
      if (PyByteArray_Resize(out_.ptr(), static_cast<Py_ssize_t>(wanted)) != 0)
        throw py::error_already_set();
    }
    if (size > 0)
      std::memcpy(PyByteArray_AS_STRING(out_.ptr()) + used_, data, size);
    used_ += size;
  }
  void tag(char t) { put(&t, 1); }
  template <typename T>
  void scalar(T value) {
    put(&value, sizeof value);
  }
  void blob(const void* data, size_t size) {
    scalar<uint64_t>(size);
    put(data, size);
  }

  py::object finish() {
    if (PyByteArray_Resize(out_.ptr(), static_cast<Py_ssize_t>(used_)) != 0)
      throw py::error_already_set();
    return std::move(out_);
  }

 private:
  size_t capacity() const { return static_cast<size_t>(PyByteArray_GET_SIZE(out_.ptr())); }

  py::object out_;
  size_t used_ = 0;
};

// The bytes of a C-contiguous buffer (a BufferError for any other), held while this lives.
class ContiguousBytes {
 public:
  explicit ContiguousBytes(py::handle obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0)
      throw py::error_already_set();
  }
  ~ContiguousBytes() { PyBuffer_Release(&view_); }
  ContiguousBytes(const ContiguousBytes&) = delete;
  ContiguousBytes& operator=(const ContiguousBytes&) = delete;

  const char* data() const { return static_cast<const char*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

class Encoder {
 public:
  Encoder(Writer& out, py::handle leaf) : out_(out), leaf_(leaf) {}

  void value(PyObject* obj, int depth) {
    if (depth > kMaxDepth)
      refuse(" is nested more than " + std::to_string(kMaxDepth) + " deep");
    PyTypeObject* type = Py_TYPE(obj);
    if (obj == Py_None) {
      out_.tag('N');
    } else if (obj == Py_True || obj == Py_False) {
      out_.tag(obj == Py_True ? 'T' : 'F');
    } else if (type == &PyLong_Type) {
      integer(obj);
    } else if (type == &PyFloat_Type) {
      out_.tag('f');
      out_.scalar(PyFloat_AS_DOUBLE(obj));
    } else if (type == &PyComplex_Type) {
      out_.tag('c');
      out_.scalar(PyComplex_RealAsDouble(obj));
      out_.scalar(PyComplex_ImagAsDouble(obj));
    } else if (type == &PyUnicode_Type) {
      text(obj);
    } else if (type == &PyBytes_Type || type == &PyByteArray_Type) {
      out_.tag('b');
      const bool isBytes = type == &PyBytes_Type;
      out_.blob(isBytes ? PyBytes_AS_STRING(obj) : PyByteArray_AS_STRING(obj),
                static_cast<size_t>(isBytes ? PyBytes_GET_SIZE(obj) : PyByteArray_GET_SIZE(obj)));
    } else if (type == &PyList_Type || type == &PyTuple_Type) {
      sequence(obj, type == &PyList_Type, depth);
    } else if (type == &PyDict_Type) {
      mapping(obj, depth);
    } else {
      leaf(obj);
    }
  }

 private:
  [[noreturn]] void refuse(const std::string& why) { throw py::type_error(spellPath(path_) + why); }

  void integer(PyObject* obj) {
    int overflow = 0;
    const long long small = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow == 0) {
      out_.tag('i');
      out_.scalar<int64_t>(small);
      return;
    }
    // Two's complement, little-endian, in as many bytes as it takes (a decimal string would meet
    // Python's limit on int-to-str digits, a ValueError at 4300).
    const auto handle = py::handle(obj);
    const auto bits = handle.attr("bit_length")().cast<size_t>();
    py::bytes raw = handle.attr("to_bytes")(bits / 8 + 1, "little", py::arg("signed") = true);
    const std::string_view view = raw;
    out_.tag('I');
    out_.blob(view.data(), view.size());
  }

  void text(PyObject* obj) {
    Py_ssize_t size = 0;
    if (const char* utf8 = PyUnicode_AsUTF8AndSize(obj, &size)) {
      out_.tag('s');
      out_.blob(utf8, static_cast<size_t>(size));
      return;
    }
    PyErr_Clear();  // lone surrogates: encoded as they are, and decoded back the same way
    auto raw =
        py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(obj, "utf-8", "surrogatepass"));
    if (!raw)
      throw py::error_already_set();
    out_.tag('s');
    out_.blob(PyBytes_AS_STRING(raw.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(raw.ptr())));
  }

  void sequence(PyObject* obj, bool isList, int depth) {
    const Py_ssize_t count = isList ? PyList_GET_SIZE(obj) : PyTuple_GET_SIZE(obj);
    out_.tag(isList ? 'l' : 't');
    out_.scalar<uint64_t>(static_cast<uint64_t>(count));
    for (Py_ssize_t i = 0; i < count; ++i) {
      // A leaf's Python may change a list: each item is held while it is encoded.
      if (isList && i >= PyList_GET_SIZE(obj))
        throw py::value_error(spellPath(path_) + " changed size while it was encoded");
      auto item = py::reinterpret_borrow<py::object>(isList ? PyList_GET_ITEM(obj, i)
                                                            : PyTuple_GET_ITEM(obj, i));
      path_.push_back(PathStep{PathStep::kIndex, i});
      value(item.ptr(), depth + 1);
      path_.pop_back();
    }
  }

  void mapping(PyObject* obj, int depth) {
    auto items = py::reinterpret_steal<py::object>(PyDict_Items(obj));  // a snapshot, as above
    if (!items)
      throw py::error_already_set();
    const Py_ssize_t count = PyList_GET_SIZE(items.ptr());
    out_.tag('d');
    out_.scalar<uint64_t>(static_cast<uint64_t>(count));
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* pair = PyList_GET_ITEM(items.ptr(), i);
      PyObject* key = PyTuple_GET_ITEM(pair, 0);
      path_.push_back(PathStep{PathStep::kKeyOf});
      value(key, depth + 1);
      path_.back() = PathStep{PathStep::kKey, 0, key};
      value(PyTuple_GET_ITEM(pair, 1), depth + 1);
      path_.pop_back();
    }
  }

  // An array, a NumPy scalar or a tensor, as Python describes it; anything else is refused.
  void leaf(PyObject* obj) {
    py::object described = leaf_(py::handle(obj));
    if (PyUnicode_Check(described.ptr()))  // Python's reason: an array of a dtype that does not
      refuse(" is " + described.cast<std::string>());  // travel
    if (described.is_none()) {
      py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj));
      const auto module = py::str(type.attr("__module__")).cast<std::string>();
      const auto name = py::str(type.attr("__qualname__")).cast<std::string>();
      refuse(" is a " + module + "." + name +
             ", which chorus does not send: objects travel as plain data (" + kWhatTravels +
             "), never pickled (DESIGN §8)");
    }
    auto parts = described.cast<py::tuple>();
    const std::string tag = parts[0].cast<std::string>();
    const std::string dtype = parts[1].cast<std::string>();
    std::vector<uint64_t> shape;
    for (py::handle extent : parts[2]) shape.push_back(extent.cast<uint64_t>());
    if (tag.size() != 1)
      throw py::value_error("a leaf's tag is one character");
    const ContiguousBytes values(parts[3]);
    out_.put(tag.data(), 1);
    out_.blob(dtype.data(), dtype.size());
    out_.scalar<uint64_t>(shape.size());
    for (uint64_t extent : shape) out_.scalar(extent);
    out_.blob(values.data(), values.size());
  }

  Writer& out_;
  py::handle leaf_;
  std::vector<PathStep> path_;
};

[[noreturn]] void malformed(const std::string& why) {
  throw py::value_error("malformed object: " + why);
}

class Decoder {
 public:
  // `owner`: a one-dimensional memoryview of bytes over `data`.
  Decoder(const char* data, size_t size, py::handle owner, py::handle leaf)
      : data_(data), size_(size), owner_(owner), leaf_(leaf) {}

  size_t left() const { return size_ - at_; }

  py::object value(int depth) {
    if (depth > kMaxDepth)
      malformed("nested more than " + std::to_string(kMaxDepth) + " deep");
    const char tag = *take(1, "a tag");
    switch (tag) {
      case 'N':
        return py::none();
      case 'T':
        return py::bool_(true);
      case 'F':
        return py::bool_(false);
      case 'i':
        return steal(PyLong_FromLongLong(scalar<int64_t>("an int")));
      case 'I':
        return bigInteger();
      case 'f':
        return steal(PyFloat_FromDouble(scalar<double>("a float")));
      case 'c': {
        const double real = scalar<double>("a complex");
        return steal(PyComplex_FromDoubles(real, scalar<double>("a complex")));
      }
      case 's': {
        const auto [data, size] = blob("a str");
        return steal(PyUnicode_DecodeUTF8(data, static_cast<Py_ssize_t>(size), "surrogatepass"));
      }
      case 'b': {
        const auto [data, size] = blob("bytes");
        return steal(PyBytes_FromStringAndSize(data, static_cast<Py_ssize_t>(size)));
      }
      case 'l':
      case 't':
        return sequence(tag == 'l', depth);
      case 'd':
        return mapping(depth);
      case 'a':
      case 'g':
      case 'p':
        return leaf(tag);
      default:
        malformed("unknown tag " + py::repr(py::bytes(&tag, 1)).cast<std::string>());
    }
  }

 private:
  static py::object steal(PyObject* made) {
    if (made == nullptr)
      throw py::error_already_set();
    return py::reinterpret_steal<py::object>(made);
  }

  const char* take(size_t n, const char* what) {
    if (n > left()) {
      malformed(std::string(what) + " needs " + std::to_string(n) + " bytes, " +
                std::to_string(left()) + " are left");
    }
    const char* chunk = data_ + at_;
    at_ += n;
    return chunk;
  }

  template <typename T>
  T scalar(const char* what) {
    T value;
    std::memcpy(&value, take(sizeof value, what), sizeof value);
    return value;
  }

  std::pair<const char*, size_t> blob(const char* what) {
    const auto size = scalar<uint64_t>(what);
    return {take(size, what), size};
  }

  // A count of values that each take at least `bytesEach` bytes: checked against what is left
  // before anything is allocated for them.
  Py_ssize_t count(const char* what, size_t bytesEach) {
    const auto n = scalar<uint64_t>(what);
    if (n > left() / bytesEach)
      malformed(std::string(what) + " of " + std::to_string(n) + " values in " +
                std::to_string(left()) + " bytes");
    return static_cast<Py_ssize_t>(n);
  }

  py::object bigInteger() {
    const auto [data, size] = blob("an int");
    if (size == 0)
      malformed("an int of no bytes");
    py::handle type = reinterpret_cast<PyObject*>(&PyLong_Type);
    return type.attr("from_bytes")(py::bytes(data, size), "little", py::arg("signed") = true);
  }

  // The items are decoded first and the container made last: a list or tuple with unfilled (NULL)
  // slots is already seen by the garbage collector, and Python runs while items decode (a leaf's
  // _build, int.from_bytes), so a gc callback could walk into a NULL item.
  py::object sequence(bool isList, int depth) {
    const Py_ssize_t n = count(isList ? "a list" : "a tuple", 1);
    std::vector<py::object> items;
    items.reserve(static_cast<size_t>(std::min<Py_ssize_t>(n, 4096)));
    for (Py_ssize_t i = 0; i < n; ++i) items.push_back(value(depth + 1));
    py::object result = steal(isList ? PyList_New(n) : PyTuple_New(n));
    for (Py_ssize_t i = 0; i < n; ++i) {  // no Python runs here: every slot is filled at once
      PyObject* item = items[static_cast<size_t>(i)].release().ptr();
      if (isList)
        PyList_SET_ITEM(result.ptr(), i, item);
      else
        PyTuple_SET_ITEM(result.ptr(), i, item);
    }
    return result;
  }

  py::object mapping(int depth) {
    const Py_ssize_t n = count("a dict", 2);
    py::object result = steal(PyDict_New());
    for (Py_ssize_t i = 0; i < n; ++i) {
      py::object key = value(depth + 1);
      py::object item = value(depth + 1);
      if (PyDict_SetItem(result.ptr(), key.ptr(), item.ptr()) != 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
          throw py::error_already_set();
        py::error_already_set error;  // an unhashable key (a list)
        malformed("a dict key: " + std::string(error.what()));
      }
    }
    return result;
  }

  py::object leaf(char tag) {
    const auto [name, nameSize] = blob("a dtype");
    const auto dims = scalar<uint64_t>("a shape");
    if (dims > kMaxDims)
      malformed("an array of " + std::to_string(dims) + " dimensions");
    py::tuple shape(dims);
    for (uint64_t d = 0; d < dims; ++d) {
      const auto extent = scalar<uint64_t>("an extent");
      if (extent > static_cast<uint64_t>(INT64_MAX))
        malformed("an extent of " + std::to_string(extent));
      shape[d] = py::int_(extent);
    }
    const auto [values, size] = blob("an array's values");
    // A slice of the owning memoryview, not a view of the raw memory: a view the builder keeps
    // (in a traceback, say) then holds the payload, which cannot be resized or freed under it.
    const auto start = static_cast<Py_ssize_t>(values - data_);
    py::object slice =
        steal(PySequence_GetSlice(owner_.ptr(), start, start + static_cast<Py_ssize_t>(size)));
    return leaf_(py::str(&tag, 1), py::bytes(name, nameSize), shape, slice);
  }

  const char* data_;
  size_t size_;
  size_t at_ = 0;
  py::handle owner_;
  py::handle leaf_;
};

py::object encodePlain(py::handle obj, py::bytes prefix, py::handle leaf) {
  Writer out(std::move(prefix));
  Encoder(out, leaf).value(obj.ptr(), 0);
  return out.finish();
}

py::object decodePlain(py::handle data, py::handle leaf) {
  const ContiguousBytes bytes(data);  // refuses what is not contiguous
  auto view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(data.ptr()));
  if (!view)
    throw py::error_already_set();
  py::object owner = view.attr("cast")("B");
  Decoder decoder(bytes.data(), bytes.size(), owner, leaf);
  py::object result = decoder.value(0);
  if (decoder.left() != 0)
    malformed(std::to_string(decoder.left()) + " bytes after its end");
  return result;
}

}  // namespace

void bindPlainData(py::module_& module) {
  module.def("encode_plain", &encodePlain, py::arg("obj"), py::arg("prefix"), py::arg("leaf"),
             "`prefix`, then `obj` in chorus's plain-data format, as one bytearray "
             "(chorus/_plain_data.py); TypeError naming where a value that does not travel "
             "stands.");
  module.def("decode_plain", &decodePlain, py::arg("data"), py::arg("leaf"),
             "The object that encode_plain wrote into `data`; ValueError if it is malformed.");
}

}  // namespace chorus::python
