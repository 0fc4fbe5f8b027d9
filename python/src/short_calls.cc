// The short paths of the collectives (declared in short_calls.h), the table of every operation's
// short path, and the module's CPython functions over them (METH_FASTCALL, no pybind11 dispatch).
//
// Each path reads its arrays (short_arrays.h), makes its result, and issues its Communicator
// method (input, output) under BlockingCalls, all in one GIL release (runOperation); async, it
// returns a Work of the result at once. `comm` is the call's Communicator (the world's, a Group's
// or a rank_list's), and roots and peers are its ranks (front_calls.cc translates a rank_list's
// from world ranks). What each returns is what
// the package's general path (python/chorus/_ops.py) returns for the same call:
//  - allreduce, broadcast, allgather, reduce_scatter, scatter, all_to_all: the result, in a new
//    array of x's framework or the caller's `out` (or x, in place: allreduce, broadcast);
//  - reduce: the reduction on the root; elsewhere a copy of x (a new array, or `out` holding one),
//    or x itself in place;
//  - gather: the concatenation on the root; elsewhere x itself (the same object), `out` checked
//    and left untouched;
//  - barrier: None.
#include "short_calls.h"

#include <array>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "short_arrays.h"
#include "torch_view.h"

namespace chorus::python {
namespace {

int64_t product(std::span<const int64_t> extents) {
  int64_t count = 1;
  for (const int64_t extent : extents) count *= extent;
  return count;
}

// Runs `issue(output)` blocking for an operation whose result has `extents`: into the caller's
// `out` (of that many elements), or a new array like x; NotImplemented when `out` does not fit.
template <typename Issue>
py::object intoOutput(const Tensor& input,
                      const ShortCall& call,
                      std::span<const int64_t> extents,
                      Issue issue) {
  py::object result;
  const auto output = outputFor(input, call.x, call.out, extents, result);
  if (!output || output->numel() != product(extents))
    return notImplemented();
  py::object pending = runOperation(
      call.async, [&] { return issue(*output); }, [&] { return py::make_tuple(call.x, result); });
  return call.async ? asyncWork(std::move(pending), std::move(result)) : result;
}

// `result`, or a Work of it: an operation issued (runOperation) returning `pending`.
py::object resultOf(const ShortCall& call, py::object pending, py::object result) {
  return call.async ? asyncWork(std::move(pending), std::move(result)) : result;
}

// As intoOutput, for a result of x's size.
template <typename Issue>
py::object intoSameSize(const Tensor& input, const ShortCall& call, Issue issue) {
  return intoOutput(input, call, input.shape(), issue);
}

// Whether x has dimension `axis` and its extent divides into `size` chunks (the general path
// raises the error otherwise).
bool splitsEvenly(const Tensor& input, int axis, int size) {
  return input.dim() > axis && input.shape()[static_cast<size_t>(axis)] % size == 0;
}

}  // namespace

py::object allreduceShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto op = reduceOpOf(call.arguments[0]);
  if (!input || !op || !isValidReduction(*op, input->dtype()))
    return notImplemented();
  return intoSameSize(*input, call,
                      [&](const Tensor& output) { return comm.allreduce(*input, output, *op); });
}

py::object broadcastShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto root = rankIn(call.arguments[0], comm.size());
  if (!input || !root)
    return notImplemented();
  return intoSameSize(*input, call,
                      [&](const Tensor& output) { return comm.broadcast(*input, output, *root); });
}

py::object reduceShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto root = rankIn(call.arguments[0], comm.size());
  const auto op = reduceOpOf(call.arguments[1]);
  if (!input || !root || !op || !isValidReduction(*op, input->dtype()))
    return notImplemented();
  if (comm.rank() == *root) {
    return intoSameSize(*input, call, [&](const Tensor& output) {
      return comm.reduce(*input, output, *root, *op);
    });
  }
  if (call.out.ptr() == call.x.ptr()) {  // in place: x is not written here, but must be writable
    if (!writableTensor(call.x))         // (as on the root, where the general path refuses it)
      return notImplemented();
    py::object pending = runOperation(
        call.async, [&] { return comm.reduce(*input, *input, *root, *op); },
        [&] { return py::reinterpret_borrow<py::object>(call.x); });
    return resultOf(call, std::move(pending), py::reinterpret_borrow<py::object>(call.x));
  }
  if (call.async)  // the copy of x follows the operation: the general path makes it in wait()
    return notImplemented();
  // A copy of x, in a new array or the caller's `out` (which C++ checks as on the root), made
  // once the reduce is done, as the general path makes it: a failed reduce leaves `out` as it was.
  py::object result;
  const auto output = outputFor(*input, call.x, call.out, input->shape(), result);
  if (!output || output->numel() != input->numel())
    return notImplemented();
  const bool fresh = call.out.is_none();
  runOperation(
      false, [&] { return comm.reduce(*input, fresh ? Tensor() : *output, *root, *op); },
      [&] { return py::make_tuple(call.x, result); });
  std::memmove(output->data(), input->data(), input->nbytes());
  return result;
}

py::object allgatherShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto axis = input ? axisIn(call.arguments[0], input->dim()) : std::nullopt;
  if (!axis)
    return notImplemented();
  return intoOutput(*input, call, scaledExtents(*input, *axis, comm.size(), 1),
                    [&](const Tensor& output) { return comm.allgather(*input, output, *axis); });
}

py::object reduceScatterShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto op = reduceOpOf(call.arguments[0]);
  if (!input || !op || !isValidReduction(*op, input->dtype()) ||
      !splitsEvenly(*input, 0, comm.size()))
    return notImplemented();
  return intoOutput(*input, call, scaledExtents(*input, 0, 1, comm.size()),
                    [&](const Tensor& output) { return comm.reduceScatter(*input, output, *op); });
}

py::object gatherShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto root = rankIn(call.arguments[0], comm.size());
  const auto axis = input ? axisIn(call.arguments[1], input->dim()) : std::nullopt;
  if (!root || !axis)
    return notImplemented();
  const auto extents = scaledExtents(*input, *axis, comm.size(), 1);
  if (comm.rank() == *root) {
    return intoOutput(*input, call, extents, [&](const Tensor& output) {
      return comm.gather(*input, output, *root, *axis);
    });
  }
  Tensor checked;  // elsewhere `out` is checked as on the root, never written
  if (!call.out.is_none()) {
    const auto output = writableTensor(call.out);
    if (!output || output->dtype() != input->dtype() || output->numel() != product(extents) ||
        isTorchTensor(call.out) != isTorchTensor(call.x))
      return notImplemented();
    checked = *output;
  }
  py::object pending = runOperation(
      call.async, [&] { return comm.gather(*input, checked, *root, *axis); },
      [&] { return py::make_tuple(call.x, call.out); });
  return resultOf(call, std::move(pending), py::reinterpret_borrow<py::object>(call.x));
}

py::object scatterShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto root = rankIn(call.arguments[0], comm.size());
  if (!input || !root || !splitsEvenly(*input, 0, comm.size()))
    return notImplemented();
  return intoOutput(*input, call, scaledExtents(*input, 0, 1, comm.size()),
                    [&](const Tensor& output) { return comm.scatter(*input, output, *root); });
}

py::object allToAllShort(Communicator& comm, const ShortCall& call) {
  const auto input = inputTensor(call.x, true);
  const auto split = input ? axisIn(call.arguments[0], input->dim()) : std::nullopt;
  const auto concat = input ? axisIn(call.arguments[1], input->dim()) : std::nullopt;
  if (!split || !concat || !splitsEvenly(*input, *split, comm.size()))
    return notImplemented();
  auto extents = scaledExtents(*input, *split, 1, comm.size());
  extents[static_cast<size_t>(*concat)] *= comm.size();
  return intoOutput(*input, call, extents, [&](const Tensor& output) {
    return comm.allToAll(*input, output, *split, *concat);
  });
}

py::object barrierShort(Communicator& comm, const ShortCall& call) {
  py::object pending = runOperation(
      call.async, [&] { return comm.barrier(); }, [] { return py::none(); });
  return resultOf(call, std::move(pending), py::none());
}

std::span<const ShortOperation> shortOperations() {
  static const ShortOperation kOperations[] = {
      {"allreduce", "allreduce_array", allreduceShort, true, true, {"op"}},
      {"broadcast", "broadcast_array", broadcastShort, true, true, {"root"}},
      {"reduce", "reduce_array", reduceShort, true, true, {"root", "op"}},
      {"allgather", "allgather_array", allgatherShort, true, true, {"axis"}},
      {"reduce_scatter", "reduce_scatter_array", reduceScatterShort, true, true, {"op"}},
      {"gather", "gather_array", gatherShort, true, true, {"root", "axis"}},
      {"scatter", "scatter_array", scatterShort, true, true, {"root"}},
      {"all_to_all", "all_to_all_array", allToAllShort, true, true, {"split_axis", "concat_axis"}},
      {"barrier", "barrier_world", barrierShort, false, false, {}},
      {"send", "send_array", sendShort, true, false, {"peer", "tag"}},
      {"recv", "recv_array", recvShort, false, true, {"peer", "tag", "shape", "dtype"}},
      {"all_to_all",
       "all_to_all_splits_array",
       allToAllUnevenShort,
       true,
       false,
       {"splits", "recv_splits"},
       "splits"},
      {"allgather",
       "allgather_uneven_array",
       allgatherUnevenShort,
       true,
       false,
       {"axis", "uneven"},
       "uneven"},
  };
  return kOperations;
}

const ShortOperation* findShortOperation(std::string_view name) {
  for (const ShortOperation& operation : shortOperations()) {
    if (name == operation.name && operation.switchedBy == nullptr)
      return &operation;
  }
  return nullptr;
}

const ShortOperation* findShortVariant(std::string_view name) {
  for (const ShortOperation& operation : shortOperations()) {
    if (name == operation.name && operation.switchedBy != nullptr)
      return &operation;
  }
  return nullptr;
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

namespace {

constexpr const char* kOperationCapsule = "chorus.short_operation";

size_t argumentCount(const ShortOperation& operation) {
  size_t count = 0;
  while (count < kMostShortArguments && operation.arguments[count] != nullptr) ++count;
  return count;
}

// `<name>_array(native, [x,] [out,] arguments...)` as CPython calls it (METH_FASTCALL), `self`
// the capsule of its ShortOperation: pybind11's dispatcher would add two vector allocations and
// its overload resolution to every call. Exceptions become Python's through the translators
// pybind11 registered (errors.cc), as in its dispatcher.
PyObject* directCall(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  try {
    const auto& operation =
        *static_cast<const ShortOperation*>(PyCapsule_GetPointer(self, kOperationCapsule));
    const size_t count = argumentCount(operation);
    const auto expected =
        static_cast<Py_ssize_t>(1 + operation.takesInput + operation.takesOutput + count);
    if (nargs != expected)
      throw py::type_error(std::string(operation.direct) + " takes " + std::to_string(expected) +
                           " arguments");
    auto& comm = py::cast<Communicator&>(py::handle(args[0]));
    ShortCall call{py::handle(Py_None), py::handle(Py_None), {}};
    Py_ssize_t at = 1;
    if (operation.takesInput)
      call.x = args[at++];
    if (operation.takesOutput)
      call.out = args[at++];
    for (size_t i = 0; i < count; ++i) call.arguments[i] = args[at++];
    return operation.path(comm, call).release().ptr();
  } catch (...) {
    return setPythonError();
  }
}

std::string signatureOf(const ShortOperation& operation) {
  std::string text = std::string(operation.direct) + "(native";
  if (operation.takesInput)
    text += ", x";
  if (operation.takesOutput)
    text += ", out";
  for (size_t i = 0; i < argumentCount(operation); ++i)
    text += std::string(", ") + operation.arguments[i];
  return text + ")";
}

}  // namespace

void bindShortCalls(py::module_& module) {
  const auto operations = shortOperations();
  // CPython keeps pointers to the method definitions and their docs: made once, never moved.
  constexpr size_t kMostOperations = 16;
  static std::array<PyMethodDef, kMostOperations> methods{};
  static std::array<std::string, kMostOperations> docs;
  if (operations.size() > kMostOperations)
    throw InternalError("bindShortCalls: more short paths than kMostOperations");
  for (size_t i = 0; i < operations.size(); ++i) {
    const ShortOperation& operation = operations[i];
    if (docs[i].empty()) {
      docs[i] = signatureOf(operation) + ": the blocking " + operation.name +
                (operation.switchedBy != nullptr ? std::string(" with ") + operation.switchedBy
                                                 : std::string()) +
                " of the short path (one NumPy array or torch CPU tensor); NotImplemented when "
                "the call needs the package's general path";
      methods[i] = {operation.direct,
                    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(directCall)),
                    METH_FASTCALL, docs[i].c_str()};
    }
    py::capsule self(const_cast<ShortOperation*>(&operation), kOperationCapsule);
    PyObject* function = PyCFunction_NewEx(&methods[i], self.ptr(), nullptr);
    if (function == nullptr)
      throw py::error_already_set();
    module.attr(operation.direct) = py::reinterpret_steal<py::object>(function);
  }
}

}  // namespace chorus::python
