// The collective and point-to-point operations as seen from Python. Python allocates every result
// buffer with the input's framework (or takes the caller's out=) and passes DLPack capsules; this
// file views them as Tensors and issues the C++ operation, out of place where C++ has the form
// (a fused allreduce copies its inputs into the outputs and reduces those in place). A blocking
// call runs under BlockingCalls, so on this thread when the communicator is idle. Copies and waits
// run with the GIL released.
//
// Every function takes `dtype`: empty, or the real element type when Python had to export the
// buffer under another type of equal size (bool travels as uint8 because NumPy 1.24 and
// PyTorch 1.13 do not export bool through DLPack).
#include <pybind11/stl.h>

#include <cstring>
#include <optional>

#include "bindings.h"
#include "chorus/huge_pages.h"

namespace chorus::python {
namespace {

void copyTensor(const Tensor& from, const Tensor& to) {
  if (from.numel() != to.numel() || from.dtype() != to.dtype())
    throw InvalidArgumentError("output (" + to.describe() +
                               ") must have the input's dtype and number of elements (" +
                               from.describe() + ")");
  if (from.data() == to.data() || from.nbytes() == 0)
    return;
  if (!from.device().isCpu() || !to.device().isCpu())  // the package copies CUDA tensors itself
    throw InternalError("internal: host copy asked for a " + from.device().toString() + " tensor");
  adviseHugePagesIfLarge(to);
  std::memcpy(to.data(), from.data(), from.nbytes());
}

bool present(py::handle capsule) { return !capsule.is_none(); }

// A blocking call (not async) runs on this thread when its communicator is idle, instead of being
// handed to the worker thread and back (BlockingCalls).
class BlockingUnlessAsync {
 public:
  explicit BlockingUnlessAsync(bool async) {
    if (!async)
      scope_.emplace();
  }

 private:
  std::optional<BlockingCalls> scope_;
};

Tensor optionalTensor(py::handle capsule, const std::string& dtype) {
  return present(capsule) ? tensorFromCapsule(capsule, dtype) : Tensor();
}

py::object allreduce(Communicator& comm,
                     py::list inputs,
                     py::list outputs,
                     const std::string& dtype,
                     const std::string& op,
                     bool async) {
  sweepAbandonedWork();
  ReduceOp reduceOp = parseReduceOp(op);
  std::vector<Tensor> in, out;
  for (auto capsule : inputs) in.push_back(tensorFromCapsule(capsule, dtype));
  for (auto capsule : outputs) out.push_back(tensorFromCapsule(capsule, dtype));
  if (!in.empty() && in.size() != out.size())
    throw InternalError("internal: allreduce got unequal input and output lists");
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release release;
    BlockingUnlessAsync blocking(async);
    if (in.size() == 1) {
      adviseHugePagesIfLarge(out[0]);
      work = comm.allreduce(in[0], out[0], reduceOp);  // one pass, input to output
    } else {
      for (size_t i = 0; i < in.size(); ++i) copyTensor(in[i], out[i]);  // fused: in place
      work = out.size() == 1 ? comm.allreduce(out[0], reduceOp) : comm.allreduce(out, reduceOp);
    }
  }
  return finishOperation(std::move(work), py::make_tuple(inputs, outputs), async);
}

// broadcast and reduce from `input` (none: in place) into `output`. A reduce's non-root ranks get
// a copy of their input in `output`, so every rank's output holds what the package returns.
py::object rooted(Communicator& comm,
                  bool isBroadcast,
                  py::object input,
                  py::object output,
                  const std::string& dtype,
                  int root,
                  const std::string& op,
                  bool async) {
  sweepAbandonedWork();
  Tensor out = tensorFromCapsule(output, dtype);
  Tensor in = present(input) ? tensorFromCapsule(input, dtype) : out;
  ReduceOp reduceOp = isBroadcast ? ReduceOp::kSum : parseReduceOp(op);
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release release;
    BlockingUnlessAsync blocking(async);
    if (in.data() != out.data())
      adviseHugePagesIfLarge(out);
    if (isBroadcast) {
      work = comm.broadcast(in, out, root);
    } else {
      if (comm.rank() != root)
        copyTensor(in, out);
      work = comm.reduce(in, out, root, reduceOp);
    }
  }
  return finishOperation(std::move(work), py::make_tuple(input, output), async);
}

// The out-of-place collectives: allgather, reduce_scatter, gather, scatter, all_to_all.
py::object outOfPlace(Communicator& comm,
                      const std::string& collective,
                      py::object input,
                      py::object output,
                      const std::string& dtype,
                      int root,
                      int axis,
                      int axis2,
                      const std::string& op,
                      bool async) {
  sweepAbandonedWork();
  Tensor in = optionalTensor(input, dtype);
  Tensor out = optionalTensor(output, dtype);
  ReduceOp reduceOp = collective == "reduce_scatter" ? parseReduceOp(op) : ReduceOp::kSum;
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release release;
    BlockingUnlessAsync blocking(async);
    if (collective == "allgather")
      work = comm.allgather(in, out, axis);
    else if (collective == "reduce_scatter")
      work = comm.reduceScatter(in, out, reduceOp);
    else if (collective == "gather")
      work = comm.gather(in, out, root, axis);
    else if (collective == "scatter")
      work = comm.scatter(in, out, root);
    else if (collective == "all_to_all")
      work = comm.allToAll(in, out, axis, axis2);
    else
      throw InternalError("internal: unknown collective " + collective);
  }
  return finishOperation(std::move(work), py::make_tuple(input, output), async);
}

py::object pointToPoint(Communicator& comm,
                        bool isSend,
                        py::object buffer,
                        const std::string& dtype,
                        int peer,
                        int tag,
                        bool async) {
  sweepAbandonedWork();
  Tensor tensor = tensorFromCapsule(buffer, dtype);
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release release;
    BlockingUnlessAsync blocking(async);
    work = isSend ? comm.send(tensor, peer, tag) : comm.recv(tensor, peer, tag);
  }
  return finishOperation(std::move(work), py::make_tuple(buffer), async);
}

py::object barrier(Communicator& comm, bool async) {
  sweepAbandonedWork();
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release release;
    BlockingUnlessAsync blocking(async);
    work = comm.barrier();
  }
  return finishOperation(std::move(work), py::none(), async);
}

std::shared_ptr<Communicator> communicator(const RankList& rankList) {
  py::gil_scoped_release release;  // creating a group is collective and may block
  return DistContext::get().communicator(rankList);
}

}  // namespace

void adviseHugePagesIfLarge(const Tensor& result) {
  constexpr size_t kThreshold = 4u << 20;
  if (result.device().isCpu() && result.nbytes() >= kThreshold)
    adviseHugePages(result.data(), result.nbytes());
}

Tensor tensorFromCapsule(py::handle capsule, const std::string& dtype) {
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr)
    throw py::error_already_set();
  Tensor tensor = Tensor::fromDLPack(managed);  // CUDA tensors too: the runtime routes them
  if (dtype.empty())
    return tensor;
  DataType real = parseDataType(dtype);
  if (dataTypeSize(real) != tensor.elementSize())
    throw InternalError("internal: dtype override " + dtype + " has another element size");
  return Tensor(tensor.data(), real, tensor.shape(), tensor.strides(), tensor.device());
}

Tensor hostTensorFromCapsule(py::handle capsule, const std::string& dtype, const char* what) {
  Tensor tensor = tensorFromCapsule(capsule, dtype);
  if (!tensor.device().isCpu()) {
    throw UnsupportedError(std::string(what) + " takes tensors in host memory, not " +
                           tensor.device().toString() + " tensors (move them with .cpu())");
  }
  return tensor;
}

void bindOperations(py::module_& module) {
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
  module.def("allreduce", &allreduce);
  module.def("rooted", &rooted);
  module.def("out_of_place", &outOfPlace);
  module.def("point_to_point", &pointToPoint);
  module.def("barrier", &barrier);
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
