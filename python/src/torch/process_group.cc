#include "process_group.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>

#include "chorus/error.h"
#include "sparse_allreduce.h"
#include "torch_blocking.h"
#include "torch_streams.h"
#include "torch_tensors.h"

namespace chorus::torch_backend {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

namespace {

// torch >= 2.7 marks its options with asyncOp (torch_blocking.h); torch 1.13 does not.
struct MarkedOptions {
  bool asyncOp = true;
};
struct UnmarkedOptions {};
static_assert(HasAsyncOp<MarkedOptions>::value && !HasAsyncOp<UnmarkedOptions>::value);

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "chorus: ", op, " takes one tensor per process, not ",
              tensors.size());
  return tensors.front();
}

// Flattens `tensors` (equal sizes and dtype: torch's list forms) into one [n, ...] tensor.
at::Tensor stacked(const std::vector<at::Tensor>& tensors, const at::Tensor& like, const char* op) {
  for (const auto& tensor : tensors) {
    TORCH_CHECK(tensor.scalar_type() == like.scalar_type() && tensor.numel() == like.numel(),
                "chorus: ", op,
                ": every tensor of the list must have the dtype and number of "
                "elements of ",
                dtypeName(like.scalar_type()), " x ", like.numel());
  }
  return at::stack(tensors).contiguous();
}

// The chorus views of an input and output pair of a flat collective, checked.
struct FlatPair {
  chorus::Tensor input, output;
};

// A flat pair's checks: one dtype, both contiguous, and `whole` (the output of an allgather, the
// input of a reduce-scatter) holding group size x `part`.
void checkFlatPair(const at::Tensor& output,
                   const at::Tensor& input,
                   bool outputIsWhole,
                   int size,
                   const char* op) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: ", op, ": the output's dtype ",
              dtypeName(output.scalar_type()), " differs from the input's ",
              dtypeName(input.scalar_type()));
  const at::Tensor& whole = outputIsWhole ? output : input;
  const at::Tensor& part = outputIsWhole ? input : output;
  const char* wholeName = outputIsWhole ? "output" : "input";
  const char* partName = outputIsWhole ? "input" : "output";
  TORCH_CHECK(whole.numel() == size * part.numel(), "chorus: ", op, ": the ", wholeName, " holds ",
              whole.numel(), " elements; it must hold group size x ", partName, " (", size, " x ",
              part.numel(), ")");
  for (const auto& [tensor, name] : {std::pair{&output, "output"}, std::pair{&input, "input"}}) {
    TORCH_CHECK(tensor->is_contiguous(), "chorus: ", op, ": the ", name,
                " is not contiguous (call .contiguous() on it)");
  }
}

// allgather_into_tensor: the output holds the group's inputs end to end.
FlatPair allgatherPair(const at::Tensor& output,
                       const at::Tensor& input,
                       int size,
                       const char* op) {
  checkFlatPair(output, input, true, size, op);
  return {bytes(input, "input", op), bytes(output, "output", op)};
}

// reduce_scatter_tensor: the input holds group size x output.
FlatPair reduceScatterPair(const at::Tensor& output,
                           const at::Tensor& input,
                           int size,
                           const char* op) {
  checkFlatPair(output, input, false, size, op);
  return {typed(input.view({-1}), "input", op), typed(output.view({-1}), "output", op)};
}

}  // namespace

namespace {

std::mutex namesMutex;

// A name for the group being made that agrees on all its members, as subgroup() names its own:
// `base` (its parent's name and its members), and how many such groups this process made before.
std::string agreedName(const std::string& base) {
  static std::map<std::string, uint64_t> made;
  const std::lock_guard<std::mutex> lock(namesMutex);
  return base + "#" + std::to_string(made[base]++);
}

// The store of torch's default group, which every rank shares: the monitored barriers of every
// group meet there. torch's stores for other groups add their group names, which need not agree.
// The default group's end forgets it (~ProcessGroupChorus): kept, it outlived
// destroy_process_group(), and rank 0's TCPStore went on listening on MASTER_PORT, so that the
// next init_process_group's barrier met in the old store, whose keys were already there (an audit
// found it: "worker_count=4" for 2 ranks, then a timeout). A weak pointer would not do: c10 runs a
// store's destructor, which closes its socket, only once its weak references are gone too.
c10::intrusive_ptr<c10d::Store>& defaultGroupStore() {
  static c10::intrusive_ptr<c10d::Store> store;
  return store;
}

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += std::to_string(r) + ",";
  return text;
}

}  // namespace

void ProcessGroupChorus::rememberDefaultGroupStore(c10::intrusive_ptr<c10d::Store> store) {
  const std::lock_guard<std::mutex> lock(namesMutex);
  defaultGroupStore() = std::move(store);
}

c10::intrusive_ptr<ProcessGroupChorus> ProcessGroupChorus::over(
    const std::shared_ptr<Communicator>& parent,
    const std::string& parentName,
    const std::vector<int>& members,
    c10::intrusive_ptr<c10d::Store> store,
    std::chrono::milliseconds timeout) {
  // Named by its members alone: subgroup() tells apart the groups of one member list by how many
  // each member made before, which agrees on every member. torch's group names need not:
  // new_group(use_local_synchronization=True) advances torch's group counter on the members
  // only, so that every group made after it gets another name on the ranks outside it (gloo then
  // fails; tests/python/test_29_torch_composable.py).
  auto comm = parent->subgroup(members, "torch");
  comm->setTimeout(timeout);
  {
    const std::lock_guard<std::mutex> lock(namesMutex);
    if (defaultGroupStore())
      store = defaultGroupStore();
  }
  return c10::make_intrusive<ProcessGroupChorus>(std::move(comm), std::move(store),
                                                 agreedName(parentName + "/" + joined(members)));
}

#if CHORUS_TORCH_MAJOR > 2 || (CHORUS_TORCH_MAJOR == 2 && CHORUS_TORCH_MINOR >= 8)
// `ranks` are ranks of this group (torch's split_group says so); a rank in none of the splits
// gets torch's split_ranks[0] and no group.
c10::intrusive_ptr<c10d::Backend> ProcessGroupChorus::split(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  if (std::find(ranks.begin(), ranks.end(), getRank()) == ranks.end())
    return {};
  return translated([&]() -> c10::intrusive_ptr<c10d::Backend> {
    return over(comm_, name_, ranks, store, opts ? opts->timeout : comm_->timeout());
  });
}
#endif

ProcessGroupChorus::ProcessGroupChorus(std::shared_ptr<Communicator> comm,
                                       c10::intrusive_ptr<c10d::Store> store,
                                       std::string name)
    : BackendBase(comm->rank(), comm->size()),
      comm_(std::move(comm)),
      completer_(std::make_shared<FutureCompleter>()),
      lifetimes_(std::make_shared<TensorLifetimes>()),
      name_(name),
      monitored_(std::move(store), std::move(name)) {}

ProcessGroupChorus::~ProcessGroupChorus() {
  if (!defaultGroup_)
    return;
  const std::lock_guard<std::mutex> lock(namesMutex);
  defaultGroupStore().reset();
}

WorkPtr ProcessGroupChorus::finish(c10d::OpType type, Issued issued) {
  if (type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
      type != c10d::OpType::RECVANYSOURCE)
    ++collectivesIssued_;
  lifetimes_->release();  // the tensors of earlier operations that are done with them
  std::shared_ptr<StreamMark> copied;
  if (const int device = firstCudaDevice({&issued.outputs, &issued.keepAlive});
      device >= 0 && issued.after) {
    // CUDA: the copy-out is queued now, on a stream of torch's pool ordered after the operations
    // (nothing of the caller's waits for the collective), and marked: every wait of the work
    // orders its stream after the mark too. It is done even if the work is dropped.
    const TorchSideStream side(device);
    {
      const TorchStreamScope stream(device);  // chorus orders the side stream
      for (const auto& work : issued.works) {
        try {
          work->wait();
        } catch (...) {  // the work's failure: its wait() raises it
        }
      }
    }
    issued.after();
    copied = StreamMark::here(device);
    issued.after = nullptr;
  }
  return c10::make_intrusive<ChorusWork>(getRank(), type, std::move(issued.works),
                                         std::move(issued.outputs), std::move(issued.keepAlive),
                                         std::move(issued.after), completer_, lifetimes_,
                                         issued.sourceRank, std::move(copied));
}

WorkPtr ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                      const c10d::BroadcastOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const at::Tensor& tensor = single(tensors, "broadcast");
    const TorchStreamScope stream(deviceIndex(tensor));
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    Issued issued{
        {comm_->broadcast(bytes(buffer, "tensor", "broadcast"), static_cast<int>(opts.rootRank))},
        tensors,
        {tensor, buffer}};
    if (!buffer.is_same(tensor))
      issued.after = [tensor, buffer] { tensor.copy_(buffer); };
    return finish(c10d::OpType::BROADCAST, std::move(issued));
  });
}

WorkPtr ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                      const c10d::AllreduceOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const at::Tensor& tensor = single(tensors, "allreduce");
    if (tensor.is_sparse()) {
      TORCH_CHECK(tensor.device().is_cpu(),
                  "chorus: all_reduce of a sparse tensor takes a CPU "
                  "tensor, not one on ",
                  tensor.device());
      TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM,
                  "chorus: all_reduce of a sparse tensor supports ReduceOp.SUM only");
      tensor.copy_(sparseAllreduceSum(*comm_, tensor));  // blocks: done when this returns
      return finish(c10d::OpType::ALLREDUCE, {{}, tensors, tensors});
    }
    const TorchStreamScope stream(deviceIndex(tensor));
    auto work = comm_->allreduce(typed(tensor, "tensor", "allreduce"),
                                 toChorus(opts.reduceOp, "allreduce"));
    return finish(c10d::OpType::ALLREDUCE, {{work}, tensors, tensors});
  });
}

WorkPtr ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                const c10d::AllreduceCoalescedOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    TORCH_CHECK(!tensors.empty(), "chorus: allreduce_coalesced of an empty list");
    const TorchStreamScope stream(deviceIndex(tensors.front()));
    std::vector<chorus::Tensor> views;
    for (const auto& tensor : tensors)
      views.push_back(typed(tensor, "a tensor", "allreduce_coalesced"));
    auto work = comm_->allreduce(std::move(views), toChorus(opts.reduceOp, "allreduce_coalesced"));
    return finish(c10d::OpType::ALLREDUCE_COALESCED, {{work}, tensors, tensors});
  });
}

WorkPtr ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                   const c10d::ReduceOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const at::Tensor& tensor = single(tensors, "reduce");
    const TorchStreamScope stream(deviceIndex(tensor));
    auto work = comm_->reduce(typed(tensor, "tensor", "reduce"), static_cast<int>(opts.rootRank),
                              toChorus(opts.reduceOp, "reduce"));
    return finish(c10d::OpType::REDUCE, {{work}, tensors, tensors});
  });
}

// torch's allgather: outputs[i] holds input i's tensor from every rank (outputs[i][r]).
WorkPtr ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const c10d::AllgatherOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    return allgatherEach(outputs, inputs);
  });
}

// torch's allgather_coalesced: outputLists[r] holds rank r's tensor of every input
// (outputLists[r][i]), the transpose of allgather's.
WorkPtr ProcessGroupChorus::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                std::vector<at::Tensor>& inputs,
                                                const c10d::AllgatherOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    checkListLength(outputLists.size(), getSize(), "the list of output lists",
                    "allgather_coalesced");
    std::vector<std::vector<at::Tensor>> perInput(inputs.size());
    for (const auto& fromRank : outputLists) {
      TORCH_CHECK(fromRank.size() == inputs.size(),
                  "chorus: allgather_coalesced: an output list "
                  "holds ",
                  fromRank.size(), " tensors; it must hold one per input (", inputs.size(), ")");
      for (size_t i = 0; i < inputs.size(); ++i) perInput[i].push_back(fromRank[i]);
    }
    return allgatherEach(perInput, inputs);
  });
}

WorkPtr ProcessGroupChorus::allgatherEach(const std::vector<std::vector<at::Tensor>>& outputLists,
                                          const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(outputLists.size() == inputs.size() && !inputs.empty(),
              "chorus: allgather: ", inputs.size(), " inputs but ", outputLists.size(),
              " output lists");
  const TorchStreamScope stream(deviceIndex(inputs.front()));
  Issued issued;
  std::vector<std::function<void()>> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkListLength(outputLists[i].size(), getSize(), "the output list", "allgather");
    at::Tensor input = inputs[i].contiguous();
    for (const auto& output : outputLists[i]) {
      checkSameDevice(output, input, "an output", "allgather");
      TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == input.numel(),
                  "chorus: allgather: every output must have the input's dtype and number of "
                  "elements (",
                  dtypeName(input.scalar_type()), " x ", input.numel(), ")");
    }
    at::Tensor gathered = byteBuffer(getSize() * static_cast<int64_t>(input.nbytes()), input);
    issued.works.push_back(comm_->allgather(bytes(input, "input", "allgather"),
                                            bytes(gathered, "output", "allgather")));
    issued.keepAlive.insert(issued.keepAlive.end(), {input, gathered});
    copies.push_back([list = outputLists[i], gathered, stride = input.nbytes()] {
      for (size_t r = 0; r < list.size(); ++r)
        copyBytesInto(list[r], gathered.narrow(0, r * stride, stride));
    });
    issued.outputs.insert(issued.outputs.end(), outputLists[i].begin(), outputLists[i].end());
  }
  issued.after = [copies = std::move(copies)] {
    for (const auto& copy : copies) copy();
  };
  return finish(c10d::OpType::ALLGATHER, std::move(issued));
}

WorkPtr ProcessGroupChorus::_allgather_base(at::Tensor& output,
                                            at::Tensor& input,
                                            const c10d::AllgatherOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const TorchStreamScope stream(deviceIndex(input));
    const FlatPair pair = allgatherPair(output, input, getSize(), "allgather_into_tensor");
    auto work = comm_->allgather(pair.input, pair.output);
    return finish(c10d::OpType::_ALLGATHER_BASE, {{work}, {output}, {output, input}});
  });
}

#if CHORUS_TORCH_MAJOR > 2 || (CHORUS_TORCH_MAJOR == 2 && CHORUS_TORCH_MINOR >= 1)
namespace {

// Issues `issue(0)`, `issue(1)`... `issue(n - 1)`. If one throws (its checks failed), waits for
// those already issued, which use the caller's tensors, before the error goes on.
std::vector<std::shared_ptr<chorus::Work>> issueEach(
    size_t n, const std::function<std::shared_ptr<chorus::Work>(size_t)>& issue) {
  std::vector<std::shared_ptr<chorus::Work>> works;
  try {
    for (size_t i = 0; i < n; ++i) works.push_back(issue(i));
  } catch (...) {
    for (const auto& work : works) {
      try {
        work->wait();
      } catch (...) {  // the first error is the one to report
      }
    }
    throw;
  }
  return works;
}

void checkPairs(const std::vector<at::Tensor>& outputs,
                const std::vector<at::Tensor>& inputs,
                const char* op) {
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "chorus: ", op, ": ",
              inputs.size(), " inputs and ", outputs.size(),
              " outputs; it takes one output per input, and at least one");
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkSameDevice(inputs[i], inputs.front(), "an input", op);
    checkSameDevice(outputs[i], inputs.front(), "an output", op);
  }
}

}  // namespace

WorkPtr ProcessGroupChorus::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const char* op = "allgather_into_tensor_coalesced";
    checkPairs(outputs, inputs, op);
    const TorchStreamScope stream(deviceIndex(inputs.front()));
    std::vector<FlatPair> pairs;  // every pair checked before any is issued
    for (size_t i = 0; i < inputs.size(); ++i)
      pairs.push_back(allgatherPair(outputs[i], inputs[i], getSize(), op));
    Issued issued{
        issueEach(pairs.size(),
                  [&](size_t i) { return comm_->allgather(pairs[i].input, pairs[i].output); }),
        outputs, outputs};
    issued.keepAlive.insert(issued.keepAlive.end(), inputs.begin(), inputs.end());
    return finish(c10d::OpType::COALESCED, std::move(issued));
  });
}

WorkPtr ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const char* op = "reduce_scatter_tensor_coalesced";
    checkPairs(outputs, inputs, op);
    const TorchStreamScope stream(deviceIndex(inputs.front()));
    const ReduceOp reduceOp = toChorus(opts.reduceOp, op);
    std::vector<FlatPair> pairs;  // every pair checked before any is issued
    for (size_t i = 0; i < inputs.size(); ++i)
      pairs.push_back(reduceScatterPair(outputs[i], inputs[i], getSize(), op));
    Issued issued{issueEach(pairs.size(),
                            [&](size_t i) {
                              return comm_->reduceScatter(pairs[i].input, pairs[i].output,
                                                          reduceOp);
                            }),
                  outputs, outputs};
    issued.keepAlive.insert(issued.keepAlive.end(), inputs.begin(), inputs.end());
    return finish(c10d::OpType::COALESCED, std::move(issued));
  });
}
#endif

WorkPtr ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const c10d::GatherOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor input = single(inputs, "gather").contiguous();
    const TorchStreamScope stream(deviceIndex(input));
    Issued issued;
    chorus::Tensor gatheredView;
    if (getRank() == root) {
      TORCH_CHECK(outputs.size() == 1, "chorus: gather: the root passes one output list");
      checkListLength(outputs[0].size(), getSize(), "the output list", "gather");
      for (const auto& output : outputs[0]) checkSameDevice(output, input, "an output", "gather");
      at::Tensor gathered = byteBuffer(getSize() * static_cast<int64_t>(input.nbytes()), input);
      gatheredView = bytes(gathered, "output", "gather");
      issued.keepAlive.push_back(gathered);
      issued.outputs = outputs[0];
      issued.after = [list = outputs[0], gathered, stride = input.nbytes()] {
        for (size_t r = 0; r < list.size(); ++r)
          copyBytesInto(list[r], gathered.narrow(0, r * stride, stride));
      };
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                  "chorus: gather: only the root (rank ", root, ") passes output tensors");
    }
    issued.works.push_back(comm_->gather(bytes(input, "input", "gather"), gatheredView, root));
    issued.keepAlive.push_back(input);
    return finish(c10d::OpType::GATHER, std::move(issued));
  });
}

WorkPtr ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                    std::vector<std::vector<at::Tensor>>& inputs,
                                    const c10d::ScatterOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor& output = single(outputs, "scatter");
    const TorchStreamScope stream(deviceIndex(output));
    Issued issued;
    chorus::Tensor packedView;
    if (getRank() == root) {
      TORCH_CHECK(inputs.size() == 1, "chorus: scatter: the root passes one input list");
      checkListLength(inputs[0].size(), getSize(), "the input list", "scatter");
      for (const auto& input : inputs[0]) {
        checkSameDevice(input, output, "an input", "scatter");
        TORCH_CHECK(
            input.nbytes() == output.nbytes() && input.scalar_type() == output.scalar_type(),
            "chorus: scatter: every input must have the output's dtype and size (",
            dtypeName(output.scalar_type()), " x ", output.numel(), ")");
      }
      at::Tensor all = packed(inputs[0], static_cast<int64_t>(output.nbytes()), output);
      packedView = bytes(all, "input", "scatter");
      issued.keepAlive.push_back(all);
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "chorus: scatter: only the root (rank ", root, ") passes input tensors");
    }
    at::Tensor buffer = output.is_contiguous() ? output : output.contiguous();
    issued.works.push_back(comm_->scatter(packedView, bytes(buffer, "output", "scatter"), root));
    issued.keepAlive.insert(issued.keepAlive.end(), {output, buffer});
    issued.outputs = outputs;
    if (!buffer.is_same(output))
      issued.after = [output, buffer] { output.copy_(buffer); };
    return finish(c10d::OpType::SCATTER, std::move(issued));
  });
}

WorkPtr ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const c10d::ReduceScatterOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const at::Tensor& output = single(outputs, "reduce_scatter");
    const TorchStreamScope stream(deviceIndex(output));
    TORCH_CHECK(inputs.size() == 1, "chorus: reduce_scatter takes one input list");
    checkListLength(inputs[0].size(), getSize(), "the input list", "reduce_scatter");
    at::Tensor all = stacked(inputs[0], output, "reduce_scatter");
    auto work = comm_->reduceScatter(typed(all.view({-1}), "input", "reduce_scatter"),
                                     typed(output.view({-1}), "output", "reduce_scatter"),
                                     toChorus(opts.reduceOp, "reduce_scatter"));
    return finish(c10d::OpType::REDUCE_SCATTER, {{work}, outputs, {output, all}});
  });
}

WorkPtr ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output,
                                                 at::Tensor& input,
                                                 const c10d::ReduceScatterOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const TorchStreamScope stream(deviceIndex(input));
    const char* op = "reduce_scatter_tensor";
    const FlatPair pair = reduceScatterPair(output, input, getSize(), op);
    auto work = comm_->reduceScatter(pair.input, pair.output, toChorus(opts.reduceOp, op));
    return finish(c10d::OpType::_REDUCE_SCATTER_BASE, {{work}, {output}, {output, input}});
  });
}

WorkPtr ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return translated([&] {
    at::Tensor tensor = single(tensors, "send").contiguous();
    const TorchStreamScope stream(deviceIndex(tensor));
    auto work = comm_->send(bytes(tensor, "tensor", "send"), dstRank, tag);
    return finish(c10d::OpType::SEND, {{work}, tensors, {tensor}});
  });
}

WorkPtr ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return receive(tensors, srcRank, tag, srcRank);
}

// A recv from `peer` (a group rank, or Communicator::kAnySource); the work's sourceRank() is
// `sourceRank` (kSourceOfChorusWork: the sender, once known).
WorkPtr ProcessGroupChorus::receive(std::vector<at::Tensor>& tensors,
                                    int peer,
                                    int tag,
                                    int sourceRank) {
  return translated([&] {
    const at::Tensor& tensor = single(tensors, "recv");
    const TorchStreamScope stream(deviceIndex(tensor));
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    Issued issued{
        {comm_->recv(bytes(buffer, "tensor", "recv"), peer, tag)}, tensors, {tensor, buffer}};
    if (!buffer.is_same(tensor))
      issued.after = [tensor, buffer] { tensor.copy_(buffer); };
    issued.sourceRank = sourceRank;
    return finish(c10d::OpType::RECV, std::move(issued));
  });
}

WorkPtr ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return receive(tensors, Communicator::kAnySource, tag, ChorusWork::kSourceOfChorusWork);
}

WorkPtr ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    return finish(c10d::OpType::BARRIER, Issued({comm_->barrier()}));
  });
}

void ProcessGroupChorus::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(opts.timeout);
  translated(
      [&] { monitored_.run(getRank(), getSize(), timeout, comm_->timeout(), waitAllRanks); });
}

}  // namespace chorus::torch_backend
