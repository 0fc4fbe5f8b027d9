// The package's public functions of its operations (chorus.allreduce, broadcast, reduce,
// allgather, reduce_scatter, gather, scatter, all_to_all, send, recv and barrier) as CPython
// functions (METH_FASTCALL | METH_KEYWORDS) that
// _chorus.front(name, general, doc) makes from `general`, the package's Python function of the
// same name and signature.
//
// A call whose arguments allow it (rank_list None: the world; or a rank_list the package has
// noted (rank_lists.h), roots and peers translated from world ranks to its group's ranks; or
// group= a chorus Group that carries its communicator; synchronize False; inplace False, or True
// without out; every other parameter the short path does not read at its default) takes the
// operation's short path (short_calls.h; all_to_all with splits and allgather with uneven=True
// take their variant, chosen by that parameter) on the call's Communicator (the world's, which the
// package registers with _chorus.set_world, a rank_list's or a Group's); async_op=True makes it an
// async short call (ShortCall::async), which returns a chorus.Work as `general` does. Every other
// call, and every call the short path declines (NotImplemented), goes to `general` with its
// arguments exactly as given, so it behaves as `general` does, errors included: a wrong argument
// count or keyword reaches `general`, which raises Python's own TypeError. The common call thus
// runs no Python frame at all (the Python function around the short path cost ~0.25 us of a 0.7 us
// call).
//
// The parameters and their defaults are read from `general` (__code__, __defaults__) when the
// front is made; `doc` starts with "name(signature)\n--\n\n", so that inspect.signature and help()
// show the signature, as for any builtin.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "rank_lists.h"
#include "short_arrays.h"
#include "short_calls.h"

namespace chorus::python {
namespace {

constexpr const char* kCapsuleName = "chorus.front";
constexpr size_t kMostParameters = 12;

// The world's Communicator as the package registered it, or null; a strong reference to the
// Python object, and the C++ object it holds.
PyObject* worldObject = nullptr;
Communicator* worldCommunicator = nullptr;
// chorus.distributed's Group class (python/chorus/_groups.py), whose instances a call may pass as
// group=; a strong reference.
PyObject* groupType = nullptr;
// chorus.Work (python/chorus/_ops.py), whose instances async short calls return; a strong
// reference.
PyObject* workType = nullptr;

// Where one short path (plain or variant) finds its parameters (-1: the function has no such
// parameter, or the path does not read it).
struct Binding {
  const ShortOperation* operation = nullptr;
  int x = -1, inplace = -1, out = -1;
  std::array<int, kMostShortArguments> arguments{};  // ShortOperation::arguments', in order
  std::array<bool, kMostShortArguments> isRank{};    // whether that argument is a root or peer
  size_t argumentCount = 0;
  // The parameters the path does not read (all_to_all's splits, recv's status): a call takes it
  // only with each of them at its default.
  std::vector<int> others;
};

struct Front {
  std::string name;
  std::string doc;
  PyMethodDef method{};
  py::object general;
  std::vector<py::object> names;     // the parameters, in order
  std::vector<py::object> defaults;  // by parameter; empty for one without a default
  // Where the parameters every path reads are.
  int rankList = -1, asyncOp = -1, synchronize = -1, group = -1;
  Binding plain;
  Binding variant;    // operation null when the function has no variant
  int switchAt = -1;  // the variant's switch: a call takes the variant when it is not the default
};

int indexOf(const Front& front, const char* name) {
  for (size_t i = 0; i < front.names.size(); ++i) {
    if (PyUnicode_CompareWithASCIIString(front.names[i].ptr(), name) == 0)
      return static_cast<int>(i);
  }
  return -1;
}

// Finds the parameters `binding`'s path reads, and those it does not (`shared`: read by every
// path).
void bindPath(const Front& front, Binding& binding, const std::vector<int>& shared) {
  const ShortOperation& operation = *binding.operation;
  bool complete = true;
  std::vector<int> read = shared;
  auto find = [&](const char* name, bool wanted) {
    const int at = wanted ? indexOf(front, name) : -1;
    complete = complete && (at >= 0 || !wanted);
    if (at >= 0)
      read.push_back(at);
    return at;
  };
  binding.x = find("x", operation.takesInput);
  binding.out = find("out", operation.takesOutput);
  binding.inplace = operation.takesOutput ? indexOf(front, "inplace") : -1;
  if (binding.inplace >= 0)
    read.push_back(binding.inplace);
  while (binding.argumentCount < kMostShortArguments &&
         operation.arguments[binding.argumentCount] != nullptr) {
    const char* name = operation.arguments[binding.argumentCount];
    binding.arguments[binding.argumentCount] = find(name, true);
    binding.isRank[binding.argumentCount] =
        std::strcmp(name, "root") == 0 || std::strcmp(name, "peer") == 0;
    ++binding.argumentCount;
  }
  if (!complete)
    throw py::value_error("front: '" + front.name + "' lacks a parameter of its short path");
  for (int i = 0; i < static_cast<int>(front.names.size()); ++i) {
    if (std::find(read.begin(), read.end(), i) != read.end())
      continue;
    if (!front.defaults[i])
      throw py::value_error("front: '" + front.name + "' has a required parameter the short " +
                            "path cannot take");
    binding.others.push_back(i);
  }
}

// Reads `general`'s parameters and defaults, and finds those the short paths read.
void describe(Front& front) {
  const py::object code = front.general.attr("__code__");
  const auto count = code.attr("co_argcount").cast<size_t>();
  if (count > kMostParameters || code.attr("co_kwonlyargcount").cast<int>() != 0)
    throw py::value_error("front: '" + front.name + "' has parameters the front cannot bind");
  const py::tuple varnames = code.attr("co_varnames");
  for (size_t i = 0; i < count; ++i) front.names.push_back(varnames[i]);  // interned by CPython
  front.defaults.resize(count);
  const py::object given = front.general.attr("__defaults__");
  const py::tuple defaults = given.is_none() ? py::tuple() : py::tuple(given);
  for (size_t i = 0; i < defaults.size(); ++i)
    front.defaults[count - defaults.size() + i] = defaults[i];
  front.rankList = indexOf(front, "rank_list");
  front.asyncOp = indexOf(front, "async_op");
  front.synchronize = indexOf(front, "synchronize");
  front.group = indexOf(front, "group");
  if (front.rankList < 0 || front.asyncOp < 0 || front.synchronize < 0)
    throw py::value_error("front: '" + front.name + "' lacks a parameter of its short path");
  std::vector<int> shared{front.rankList, front.asyncOp, front.synchronize};
  if (front.group >= 0)
    shared.push_back(front.group);
  bindPath(front, front.plain, shared);
  if (front.variant.operation != nullptr) {
    front.switchAt = indexOf(front, front.variant.operation->switchedBy);
    if (front.switchAt < 0 || !front.defaults[front.switchAt])
      throw py::value_error("front: '" + front.name + "' lacks its variant's switch");
    bindPath(front, front.variant, shared);
  }
}

// The value of every parameter in a call: as given, else its default. False when the arguments do
// not bind (too many, an unknown or repeated keyword, a missing required one): `general` then says
// why.
bool bind(const Front& front,
          PyObject* const* args,
          Py_ssize_t nargs,
          PyObject* kwnames,
          std::array<PyObject*, kMostParameters>& values) {
  const auto count = static_cast<Py_ssize_t>(front.names.size());
  if (nargs > count)
    return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) values[i] = args[i];
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* keyword = PyTuple_GET_ITEM(kwnames, k);
    Py_ssize_t i = 0;
    while (i < count && front.names[i].ptr() != keyword) ++i;  // keywords are interned, usually
    for (Py_ssize_t j = 0; i == count && j < count; ++j) {
      if (PyUnicode_Compare(front.names[j].ptr(), keyword) == 0)
        i = j;
    }
    if (i == count || values[i] != nullptr)
      return false;
    values[i] = args[nargs + k];
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (values[i] == nullptr)
      values[i] = front.defaults[i].ptr();
    if (values[i] == nullptr)
      return false;
  }
  return true;
}

// Whether the call is one the short path may take; sets `output` to the output it writes (out, or
// x in place, or None for a new array).
bool isShort(const Front& front,
             const Binding& binding,
             const std::array<PyObject*, kMostParameters>& values,
             PyObject*& output) {
  if (values[front.synchronize] != Py_False ||
      (values[front.asyncOp] != Py_False &&
       (values[front.asyncOp] != Py_True || workType == nullptr)))
    return false;
  for (int i : binding.others) {
    if (values[i] != front.defaults[i].ptr())
      return false;
  }
  output = binding.out >= 0 ? values[binding.out] : Py_None;
  if (binding.inplace < 0)
    return true;
  if (values[binding.inplace] == Py_True) {
    if (output != Py_None)
      return false;
    output = values[binding.x];
    return true;
  }
  return values[binding.inplace] == Py_False;
}

// The path a call takes: the variant when its switch is not at its default.
const Binding& bindingOf(const Front& front, const std::array<PyObject*, kMostParameters>& values) {
  const bool switched =
      front.switchAt >= 0 && values[front.switchAt] != front.defaults[front.switchAt].ptr();
  return switched ? front.variant : front.plain;
}

// The communicator a short call runs on (held for the call: another thread may forget it while
// this one waits), and for a rank_list, its members, to translate roots and peers.
struct CallTarget {
  py::object native;
  const RankListTarget* rankList = nullptr;  // read before anything runs Python code
};

py::object runShort(const Front& front,
                    const Binding& binding,
                    const CallTarget& target,
                    const std::array<PyObject*, kMostParameters>& values,
                    PyObject* output) {
  ShortCall call{py::handle(binding.x >= 0 ? values[binding.x] : Py_None),
                 py::handle(output),
                 {},
                 values[front.asyncOp] == Py_True};
  // With rank_list=, roots and peers are world ranks inside the caller's group: their group ranks
  // first, from the table (anything else, not an int or not a member, is the general path's to
  // refuse); then the Python ints of them.
  std::array<std::optional<int64_t>, kMostShortArguments> groupRanks{};
  for (size_t i = 0; i < binding.argumentCount; ++i) {
    call.arguments[i] = values[binding.arguments[i]];
    if (target.rankList == nullptr || !binding.isRank[i])
      continue;
    const auto worldRank = exactInt(call.arguments[i]);
    groupRanks[i] = worldRank ? target.rankList->groupRankOf(*worldRank) : std::nullopt;
    if (!groupRanks[i])
      return notImplemented();
  }
  std::array<py::object, kMostShortArguments> translated;
  for (size_t i = 0; i < binding.argumentCount; ++i) {
    if (groupRanks[i]) {
      translated[i] = py::int_(*groupRanks[i]);
      call.arguments[i] = translated[i];
    }
  }
  Communicator& comm =
      target.native.ptr() == worldObject ? *worldCommunicator : target.native.cast<Communicator&>();
  return binding.operation->path(comm, call);
}

// The native Communicator a short call runs on: the world's for group=None and rank_list=None;
// for a rank_list the package has noted, its group's (rank_lists.h); for a chorus Group, the one
// the package set as its `_native` (a communicator whose ranks are the group ranks, so roots and
// peers need no translation). None when the call needs the general path: both group= and
// rank_list=, a rank_list not noted, another kind of group, or a Group without one (on a
// non-member, or forgotten by a reset).
CallTarget targetOf(const Front& front, const std::array<PyObject*, kMostParameters>& values) {
  PyObject* group = front.group >= 0 ? values[front.group] : Py_None;
  PyObject* rankList = values[front.rankList];
  if (rankList != Py_None) {
    const RankListTarget* noted = group == Py_None ? findRankList(rankList) : nullptr;
    if (noted == nullptr)
      return {py::none()};
    return {noted->native, noted};
  }
  if (group == Py_None)
    return {py::reinterpret_borrow<py::object>(worldObject)};
  if (groupType == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(group)) != groupType)
    return {py::none()};
  static PyObject* const nativeName = PyUnicode_InternFromString("_native");
  PyObject* native = PyObject_GetAttr(group, nativeName);
  if (native == nullptr) {
    PyErr_Clear();
    return {py::none()};
  }
  return {py::reinterpret_steal<py::object>(native)};
}

PyObject* frontCall(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const auto& front = *static_cast<const Front*>(PyCapsule_GetPointer(self, kCapsuleName));
  try {
    std::array<PyObject*, kMostParameters> values{};
    PyObject* output = nullptr;
    if (worldObject != nullptr && bind(front, args, nargs, kwnames, values) &&
        isShort(front, bindingOf(front, values), values, output)) {
      const CallTarget target = targetOf(front, values);
      if (!target.native.is_none()) {
        py::object result = runShort(front, bindingOf(front, values), target, values, output);
        if (result.ptr() != Py_NotImplemented)
          return result.release().ptr();
      }
    }
  } catch (...) {
    return setPythonError();
  }
  return PyObject_Vectorcall(front.general.ptr(), args, static_cast<size_t>(nargs), kwnames);
}

py::object makeFront(const std::string& name, py::object general, const std::string& doc) {
  auto front = std::make_unique<Front>();
  front->plain.operation = findShortOperation(name);
  front->variant.operation = findShortVariant(name);
  if (front->plain.operation == nullptr)
    throw py::value_error("front: no short path for '" + name + "'");
  front->name = name;
  front->doc = doc;
  front->general = std::move(general);
  describe(*front);
  front->method = {front->name.c_str(),
                   reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(frontCall)),
                   METH_FASTCALL | METH_KEYWORDS, front->doc.c_str()};
  PyMethodDef* method = &front->method;
  py::capsule self(front.get(), kCapsuleName, [](PyObject* capsule) {
    delete static_cast<Front*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  });
  front.release();  // the capsule owns it now
  const py::str module("chorus");
  PyObject* function = PyCFunction_NewEx(method, self.ptr(), module.ptr());
  if (function == nullptr)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(function);
}

void setWorld(py::object native) {
  Communicator* communicator = native.is_none() ? nullptr : &native.cast<Communicator&>();
  PyObject* previous = worldObject;
  worldObject = communicator == nullptr ? nullptr : native.release().ptr();
  worldCommunicator = communicator;
  Py_XDECREF(previous);
}

void setWorkType(py::object type) {
  PyObject* previous = workType;
  workType = type.is_none() ? nullptr : type.release().ptr();
  Py_XDECREF(previous);
}

void setGroupType(py::object type) {
  PyObject* previous = groupType;
  groupType = type.is_none() ? nullptr : type.release().ptr();
  Py_XDECREF(previous);
}

}  // namespace

py::object asyncWork(py::object pending, py::object result) {
  // As Work(pending=[pending], finish=None) with its result known, without running __init__'s
  // Python frame: the slots are set one by one (Work's __init__ is in _ops.py).
  auto* type = reinterpret_cast<PyTypeObject*>(workType);
  const py::tuple none;
  auto work = py::reinterpret_steal<py::object>(type->tp_new(type, none.ptr(), nullptr));
  if (!work)
    throw py::error_already_set();
  static PyObject* const names[] = {
      PyUnicode_InternFromString("_pending"), PyUnicode_InternFromString("_finish"),
      PyUnicode_InternFromString("_result"), PyUnicode_InternFromString("_done"),
      PyUnicode_InternFromString("_device")};
  py::list pendings(1);
  pendings[0] = std::move(pending);
  PyObject* const values[] = {pendings.ptr(), Py_None, result.ptr(), Py_False, Py_None};
  for (size_t i = 0; i < std::size(names); ++i) {
    if (PyObject_SetAttr(work.ptr(), names[i], values[i]) != 0)
      throw py::error_already_set();
  }
  return work;
}

void bindFronts(py::module_& module) {
  module.def("front", &makeFront, py::arg("name"), py::arg("general"), py::arg("doc"),
             "The public function `name` (an operation with a short path, short_calls.h): takes "
             "the short path where the call allows it, and calls `general` otherwise");
  module.def("set_world", &setWorld, py::arg("native"),
             "Registers the world's Communicator for the fronts' short paths (None forgets it)");
  module.def("set_work_type", &setWorkType, py::arg("type"),
             "Registers chorus's Work class, whose instances async short calls return (None: "
             "async calls take the general path)");
  module.def("set_group_type", &setGroupType, py::arg("type"),
             "Registers chorus's Group class: the fronts' short paths take group= calls with an "
             "instance whose _native is a Communicator");
}

}  // namespace chorus::python
