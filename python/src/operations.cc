// The Communicator's operations as seen from Python: one function per C++ method (allreduce,
// broadcast, reduce, allgather, reduce_scatter, gather, scatter, all_to_all, all_to_all_v,
// allgather_v, send, recv, barrier), each taking that method's arguments in its order, and besides
// them only:
//  - `native`, the Communicator, first;
//  - tensors as DLPack capsules, which the package exports (python/chorus/_arrays.py) and which
//    this file views as Tensors; the package passes one capsule twice for "in place";
//  - `dtype`: None, or the real element type of every tensor of the call when the package had to
//    export them under another type of equal size (bool travels as uint8 because NumPy 1.24 and
//    PyTorch 1.13 do not export bool through DLPack);
//  - `async`: false waits for the operation and returns None; true returns a PendingWork.
// Reduce ops and dtypes are the C++ enums, bound here as _chorus.ReduceOp and _chorus.DataType; the
// package turns the user's op name into a ReduceOp with a dict lookup, and parse_reduce_op (C++'s
// parseReduceOp) refuses what the lookup does not know. Nothing here validates a call: each C++
// method checks its own before anything is sent.
//
// Besides the operations, copy(inputs, outputs, dtype) copies host memory for what the package
// builds around them: the inputs of a fused out-of-place allreduce, which has no C++ form (so copy
// checks that pair's dtype and size itself), and a reduce's result on ranks that are not its root.
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "chorus/copy_bytes.h"
#include "chorus/huge_pages.h"

namespace chorus::python {
namespace {

using Dtype = std::optional<DataType>;

// A Tensor viewing `capsule`, or an empty Tensor for None (an output a rank may leave out).
Tensor optionalTensor(py::handle capsule, Dtype dtype) {
  return capsule.is_none() ? Tensor() : tensorFromCapsule(capsule, dtype);
}

// The second tensor of an (input, output) pair: the first again when the package passed one
// capsule twice (in place).
Tensor outputTensor(py::handle input, const Tensor& in, py::handle output, Dtype dtype) {
  return output.is(input) ? in : optionalTensor(output, dtype);
}

py::object allreduceFused(
    Communicator& comm, py::list tensors, ReduceOp op, Dtype dtype, bool async) {
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (auto capsule : tensors) views.push_back(tensorFromCapsule(capsule, dtype));
  return runOperation(
      async, [&] { return comm.allreduce(std::move(views), op); }, [&] { return tensors; });
}

// allreduce and broadcast: `call(in, out)` from `input` into `output` (the same capsule: in
// place), with huge pages advised for a large separate output.
template <typename Call>
py::object inPlaceOrInto(py::handle input, py::handle output, Dtype dtype, bool async, Call call) {
  const Tensor in = tensorFromCapsule(input, dtype);
  const Tensor out = outputTensor(input, in, output, dtype);
  return runOperation(
      async,
      [&] {
        if (in.data() != out.data())
          adviseHugePagesIfLarge(out);
        return call(in, out);
      },
      [&] { return py::make_tuple(input, output); });
}

py::object allreduce(
    Communicator& comm, py::handle input, py::handle output, ReduceOp op, Dtype dtype, bool async) {
  return inPlaceOrInto(input, output, dtype, async, [&](const Tensor& in, const Tensor& out) {
    return comm.allreduce(in, out, op);
  });
}

py::object broadcast(
    Communicator& comm, py::handle input, py::handle output, int root, Dtype dtype, bool async) {
  return inPlaceOrInto(input, output, dtype, async, [&](const Tensor& in, const Tensor& out) {
    return comm.broadcast(in, out, root);
  });
}

// `output` may be None on ranks other than the root.
py::object reduce(Communicator& comm,
                  py::handle input,
                  py::handle output,
                  int root,
                  ReduceOp op,
                  Dtype dtype,
                  bool async) {
  const Tensor in = tensorFromCapsule(input, dtype);
  const Tensor out = outputTensor(input, in, output, dtype);
  return runOperation(
      async,
      [&] {
        if (out.data() != nullptr && in.data() != out.data())
          adviseHugePagesIfLarge(out);
        return comm.reduce(in, out, root, op);
      },
      [&] { return py::make_tuple(input, output); });
}

// The out-of-place operations whose arguments are a capsule each plus plain values: views them,
// then runs `call(in, out)`. `optionalOutput`: the output may be None (ranks other than a root).
template <typename Call>
py::object betweenCapsules(
    py::handle input, py::handle output, bool optionalOutput, Dtype dtype, bool async, Call call) {
  const Tensor in = tensorFromCapsule(input, dtype);
  const Tensor out =
      optionalOutput ? optionalTensor(output, dtype) : tensorFromCapsule(output, dtype);
  return runOperation(
      async, [&] { return call(in, out); }, [&] { return py::make_tuple(input, output); });
}

py::object reduceScatter(
    Communicator& comm, py::handle input, py::handle output, ReduceOp op, Dtype dtype, bool async) {
  return betweenCapsules(
      input, output, false, dtype, async,
      [&](const Tensor& in, const Tensor& out) { return comm.reduceScatter(in, out, op); });
}

py::object allgather(
    Communicator& comm, py::handle input, py::handle output, int axis, Dtype dtype, bool async) {
  return betweenCapsules(
      input, output, false, dtype, async,
      [&](const Tensor& in, const Tensor& out) { return comm.allgather(in, out, axis); });
}

py::object gather(Communicator& comm,
                  py::handle input,
                  py::handle output,
                  int root,
                  int axis,
                  Dtype dtype,
                  bool async) {
  return betweenCapsules(
      input, output, true, dtype, async,
      [&](const Tensor& in, const Tensor& out) { return comm.gather(in, out, root, axis); });
}

py::object scatter(
    Communicator& comm, py::handle input, py::handle output, int root, Dtype dtype, bool async) {
  return betweenCapsules(
      input, output, false, dtype, async,
      [&](const Tensor& in, const Tensor& out) { return comm.scatter(in, out, root); });
}

py::object allToAll(Communicator& comm,
                    py::handle input,
                    py::handle output,
                    int splitAxis,
                    int concatAxis,
                    Dtype dtype,
                    bool async) {
  return betweenCapsules(input, output, false, dtype, async,
                         [&](const Tensor& in, const Tensor& out) {
                           return comm.allToAll(in, out, splitAxis, concatAxis);
                         });
}

py::object allToAllV(Communicator& comm,
                     py::handle input,
                     const std::vector<int64_t>& sendSplits,
                     py::handle output,
                     const std::vector<int64_t>& recvSplits,
                     Dtype dtype,
                     bool async) {
  return betweenCapsules(input, output, false, dtype, async,
                         [&](const Tensor& in, const Tensor& out) {
                           return comm.allToAllV(in, sendSplits, out, recvSplits);
                         });
}

py::object allgatherV(Communicator& comm,
                      py::handle input,
                      py::handle output,
                      const std::vector<int64_t>& recvSplits,
                      Dtype dtype,
                      bool async) {
  return betweenCapsules(
      input, output, false, dtype, async,
      [&](const Tensor& in, const Tensor& out) { return comm.allgatherV(in, out, recvSplits); });
}

py::object send(Communicator& comm, py::handle tensor, int peer, int tag, Dtype dtype, bool async) {
  const Tensor view = tensorFromCapsule(tensor, dtype);
  return runOperation(
      async, [&] { return comm.send(view, peer, tag); },
      [&] { return py::reinterpret_borrow<py::object>(tensor); });
}

py::object recv(Communicator& comm, py::handle tensor, int peer, int tag, Dtype dtype, bool async) {
  const Tensor view = tensorFromCapsule(tensor, dtype);
  return runOperation(
      async, [&] { return comm.recv(view, peer, tag); },
      [&] { return py::reinterpret_borrow<py::object>(tensor); });
}

py::object barrier(Communicator& comm, bool async) {
  return runOperation(
      async, [&] { return comm.barrier(); }, [] { return py::none(); });
}

// Copies each host inputs[i] into outputs[i], after checking every pair (the same dtype and
// number of elements). Copies of 64 KiB and more in all run with the GIL released.
void copy(py::list inputs, py::list outputs, Dtype dtype) {
  if (inputs.size() != outputs.size())
    throw InternalError("internal: copy got lists of different lengths");
  std::vector<std::pair<Tensor, Tensor>> pairs;
  size_t bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor from = tensorFromCapsule(inputs[i], dtype);
    const Tensor to = tensorFromCapsule(outputs[i], dtype);
    if (from.numel() != to.numel() || from.dtype() != to.dtype())
      throw InvalidArgumentError("output (" + to.describe() +
                                 ") must have the input's dtype and number of elements (" +
                                 from.describe() + ")");
    if (from.data() == to.data() || from.nbytes() == 0)
      continue;
    const auto* source = static_cast<const std::byte*>(from.data());
    const auto* target = static_cast<const std::byte*>(to.data());
    if (source < target + to.nbytes() && target < source + from.nbytes())
      throw InvalidArgumentError("output (" + to.describe() + ") overlaps its input (" +
                                 from.describe() +
                                 ") without being the same array; pass the same array to work "
                                 "in place, or separate memory");
    if (!from.device().isCpu() || !to.device().isCpu())  // the package copies CUDA tensors itself
      throw InternalError("internal: host copy asked for a " + from.device().toString() +
                          " tensor");
    pairs.emplace_back(from, to);
    bytes += from.nbytes();
  }
  const auto copyAll = [&pairs] {
    for (const auto& [from, to] : pairs) {
      adviseHugePagesIfLarge(to);
      copyBytes(to.data(), from.data(), from.nbytes());
    }
  };
  constexpr size_t kReleaseGilBytes = 64u << 10;
  if (bytes < kReleaseGilBytes) {
    copyAll();
    return;
  }
  py::gil_scoped_release release;
  copyAll();
}

std::shared_ptr<Communicator> communicator(const RankList& rankList) {
  py::gil_scoped_release release;  // creating a group is collective and may block
  return DistContext::get().communicator(rankList);
}

// parseReduceOp for what the package's lookup did not know: a str is parsed (a str subclass with
// an op's name is that op), anything else is refused through the same message, quoting its repr.
ReduceOp parseReduceOpObject(py::handle name) {
  if (py::isinstance<py::str>(name))
    return parseReduceOp(name.cast<std::string>());
  return parseReduceOp(std::string(py::repr(name)));
}

void bindEnums(py::module_& module) {
  py::enum_<ReduceOp> reduceOps(module, "ReduceOp");
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    reduceOps.value(std::string(toString(op)).c_str(), op);
  }
  py::enum_<DataType> dataTypes(module, "DataType");
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dtype = static_cast<DataType>(i);
    dataTypes.value(std::string(toString(dtype)).c_str(), dtype);
  }
  module.def("parse_reduce_op", &parseReduceOpObject, py::arg("name"));
}

void bindCommunicator(py::module_& module) {
  py::class_<Communicator, std::shared_ptr<Communicator>>(module, "Communicator")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("local_rank", &Communicator::localRank)
      .def_property_readonly("local_size", &Communicator::localSize)
      .def_property_readonly("world_rank", &Communicator::worldRank)
      .def_property_readonly("world_size", &Communicator::worldSize)
      .def_property_readonly("root_rank", &Communicator::rootRank)
      .def_property_readonly("group_id", &Communicator::groupId)
      .def_property_readonly("group_size", &Communicator::groupSize)
      .def_property_readonly("backend", &Communicator::backendName)
      .def_property(
          "timeout", [](const Communicator& c) { return c.timeout().count() / 1000.0; },
          [](Communicator& c, double seconds) {
            if (!(seconds > 0))
              throw InvalidArgumentError("timeout must be a positive number of seconds");
            c.setTimeout(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0)));
          });
  module.def("communicator", &communicator, py::arg("rank_list"));
  module.def(
      "forget_communicator",
      [](const RankList& rankList) { DistContext::get().forgetCommunicator(rankList); },
      py::arg("rank_list"));
}

}  // namespace

void adviseHugePagesIfLarge(const Tensor& result) {
  if (result.device().isCpu() && result.nbytes() >= kHugePagesBytes)
    adviseHugePages(result.data(), result.nbytes());
}

Tensor tensorFromCapsule(py::handle capsule, std::optional<DataType> dtype) {
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr)
    throw py::error_already_set();
  Tensor tensor = Tensor::fromDLPack(managed);  // CUDA tensors too: the runtime routes them
  if (!dtype)
    return tensor;
  if (dataTypeSize(*dtype) != tensor.elementSize())
    throw InternalError("internal: dtype override " + std::string(toString(*dtype)) +
                        " has another element size");
  return Tensor(tensor.data(), *dtype, tensor.shape(), tensor.strides(), tensor.device());
}

Tensor hostTensorFromCapsule(py::handle capsule, const char* what) {
  Tensor tensor = tensorFromCapsule(capsule, std::nullopt);
  if (!tensor.device().isCpu()) {
    throw UnsupportedError(std::string(what) + " takes tensors in host memory, not " +
                           tensor.device().toString() + " tensors (move them with .cpu())");
  }
  return tensor;
}

void bindOperations(py::module_& module) {
  bindEnums(module);
  bindCommunicator(module);
  const auto native = py::arg("native");
  const auto input = py::arg("input");
  const auto output = py::arg("output");
  const auto op = py::arg("op");
  const auto dtype = py::arg("dtype");
  const auto async = py::arg("async");
  // The out-of-place form first: it is the common call (one array, a new result).
  module.def("allreduce", &allreduce, native, input, output, op, dtype, async);
  module.def("allreduce", &allreduceFused, native, py::arg("tensors"), op, dtype, async);
  module.def("broadcast", &broadcast, native, input, output, py::arg("root"), dtype, async);
  module.def("reduce", &reduce, native, input, output, py::arg("root"), op, dtype, async);
  module.def("reduce_scatter", &reduceScatter, native, input, output, op, dtype, async);
  module.def("allgather", &allgather, native, input, output, py::arg("axis"), dtype, async);
  module.def("gather", &gather, native, input, output, py::arg("root"), py::arg("axis"), dtype,
             async);
  module.def("scatter", &scatter, native, input, output, py::arg("root"), dtype, async);
  module.def("all_to_all", &allToAll, native, input, output, py::arg("split_axis"),
             py::arg("concat_axis"), dtype, async);
  module.def("all_to_all_v", &allToAllV, native, input, py::arg("send_splits"), output,
             py::arg("recv_splits"), dtype, async);
  module.def("allgather_v", &allgatherV, native, input, output, py::arg("recv_splits"), dtype,
             async);
  module.def("send", &send, native, py::arg("tensor"), py::arg("peer"), py::arg("tag"), dtype,
             async);
  module.def("recv", &recv, native, py::arg("tensor"), py::arg("peer"), py::arg("tag"), dtype,
             async);
  module.def("barrier", &barrier, native, async);
  module.def("copy", &copy, py::arg("inputs"), py::arg("outputs"), dtype);
  // Results of this size and more get huge pages (adviseHugePagesIfLarge), so the package has
  // C++ copy them.
  module.attr("huge_pages_bytes") = kHugePagesBytes;
  // CUDA tensors (chorus/stream.h): the stream the next collectives on CUDA tensors follow, set by
  // the package from the framework's current stream before each such call.
  module.def("set_current_stream", [](std::uintptr_t stream) { setCurrentStream(stream); });
#ifdef CHORUS_WITH_NCCL
  module.attr("gpu_backend") = true;
#else
  module.attr("gpu_backend") = false;
#endif
}

}  // namespace chorus::python
