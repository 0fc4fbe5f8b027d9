// The algorithmic backend: see algorithmic_backend.h.
#include "backend/algorithmic_backend.h"

#include "algorithms/algorithm.h"
#include "core/check.h"
#include "trace/recorder.h"

namespace chorus::backend {
namespace {

// Note [Heard from every rank] (algorithms/peers.h): the timeline's peers' arrival.
void noteHeardFromAll(const void* record) noexcept {
  trace::noteAllArrived(static_cast<const trace::Ticket*>(record));
}

}  // namespace

std::unique_ptr<Backend> createTcpBackend(const BackendOptions& options) {
  return std::make_unique<AlgorithmicBackend>(
      transport::createTransport("tcp", transportOptionsOf(options, "tcp")));
}

AlgorithmicBackend::AlgorithmicBackend(std::unique_ptr<transport::Transport> transport,
                                       std::string name)
    : transport_(std::move(transport)),
      name_(name.empty() ? std::string(transport_->name()) : std::move(name)) {}

AlgorithmicBackend::~AlgorithmicBackend() { close(); }

std::string AlgorithmicBackend::name() const { return name_; }

template <typename Args, typename Table>
void AlgorithmicBackend::run(const CallContext& call,
                             Table table,
                             const char* envName,
                             const Args& args) {
  if (auto failure = transport_->failure())
    std::rethrow_exception(failure);
  const algorithms::AlgorithmInfo<Args>* algorithm = nullptr;
  try {
    algorithm = &algorithms::selectAlgorithm(table, args, size(), envName);
  } catch (...) {
    // Nothing was sent yet, but the other ranks are entering this collective: fail them too.
    transport_->abort(std::current_exception());
    throw;
  }
  // The row joins the fingerprint, so ranks that chose different algorithms (a CHORUS_*_ALGO
  // set on some ranks only) get a MismatchError instead of exchanging messages that do not fit.
  Fingerprint fingerprint = call.fingerprint;
  fingerprint.algorithm = static_cast<uint8_t>(algorithm - table.data());
  algorithms::Peers peers(*transport_, fingerprint, call.deadline, workspace_, requests_);
  if (call.record != nullptr)
    peers.onHeardFromAll(&noteHeardFromAll, call.record);
  // The front end's transfers go on while it waits (Note [Collectives and transfers together]).
  transport_->pollWhileWaiting(call.whileWaiting);
  collectiveRunning_ = true;
  try {
    algorithm->run(peers, args);
  } catch (...) {
    collectiveRunning_ = false;
    transport_->pollWhileWaiting(nullptr);
    // A collective that failed half-way leaves the ranks out of step: the transport must fail with
    // the real error so every peer hears of it (a no-op if the transport already failed). Peers'
    // destructor runs after this and finds the transport failed. See Note in algorithms/peers.h.
    transport_->abort(std::current_exception());
    throw;
  }
  collectiveRunning_ = false;
  transport_->pollWhileWaiting(nullptr);
}

// The algorithms reduce and broadcast in place (algorithms/algorithm.h): out of place, the output
// starts as a copy of the input.
void AlgorithmicBackend::allreduce(const CallContext& call, const AllreduceArgs& args) {
  copyToOutput(args.input, args.output, args.count * dataTypeSize(args.dtype));
  run(call, algorithms::allreduceAlgorithms(), "CHORUS_ALLREDUCE_ALGO",
      AllreduceArgs{args.output, args.output, args.count, args.dtype, args.op});
}

void AlgorithmicBackend::reduceScatter(const CallContext& call, const ReduceScatterArgs& args) {
  run(call, algorithms::reduceScatterAlgorithms(), "CHORUS_REDUCE_SCATTER_ALGO", args);
}

void AlgorithmicBackend::allgather(const CallContext& call, const AllgatherArgs& args) {
  run(call, algorithms::allgatherAlgorithms(), "CHORUS_ALLGATHER_ALGO", args);
}

void AlgorithmicBackend::broadcast(const CallContext& call, const BroadcastArgs& args) {
  if (rank() == args.root)
    copyToOutput(args.input, args.output, args.bytes);
  run(call, algorithms::broadcastAlgorithms(), "CHORUS_BROADCAST_ALGO",
      BroadcastArgs{args.output, args.output, args.bytes, args.root});
}

void AlgorithmicBackend::reduce(const CallContext& call, const ReduceArgs& args) {
  run(call, algorithms::reduceAlgorithms(), "CHORUS_REDUCE_ALGO", args);
}

void AlgorithmicBackend::gather(const CallContext& call, const GatherArgs& args) {
  run(call, algorithms::gatherAlgorithms(), "CHORUS_GATHER_ALGO", args);
}

void AlgorithmicBackend::scatter(const CallContext& call, const ScatterArgs& args) {
  run(call, algorithms::scatterAlgorithms(), "CHORUS_SCATTER_ALGO", args);
}

void AlgorithmicBackend::allToAll(const CallContext& call, const AllToAllArgs& args) {
  run(call, algorithms::allToAllAlgorithms(), "CHORUS_ALLTOALL_ALGO", args);
}

void AlgorithmicBackend::allToAllV(const CallContext& call, const AllToAllVArgs& args) {
  run(call, algorithms::allToAllVAlgorithms(), "CHORUS_ALLTOALLV_ALGO", args);
}

void AlgorithmicBackend::barrier(const CallContext& call) {
  run(call, algorithms::barrierAlgorithms(), "CHORUS_BARRIER_ALGO", BarrierArgs{});
}

void AlgorithmicBackend::send(
    const CallContext& call, const void* data, size_t bytes, int peer, int tag) {
  if (auto failure = transport_->failure())
    std::rethrow_exception(failure);
  algorithms::Peers peers(*transport_, call.fingerprint, call.deadline, workspace_, requests_,
                          static_cast<uint64_t>(tag));
  peers.send(peer, data, bytes);
  peers.waitAll();
}

void AlgorithmicBackend::recv(
    const CallContext& call, void* data, size_t bytes, int peer, int tag) {
  if (auto failure = transport_->failure())
    std::rethrow_exception(failure);
  algorithms::Peers peers(*transport_, call.fingerprint, call.deadline, workspace_, requests_,
                          static_cast<uint64_t>(tag));
  peers.recv(peer, data, bytes);
  peers.waitAll();
}

void AlgorithmicBackend::postSend(const CallContext& call,
                                  const void* data,
                                  size_t bytes,
                                  int peer,
                                  int tag,
                                  Transfer& transfer) {
  transport_->postSend(peer, static_cast<uint64_t>(tag), call.fingerprint, data, bytes,
                       transfer.request);
}

void AlgorithmicBackend::postRecv(
    const CallContext& call, void* data, size_t bytes, int peer, int tag, Transfer& transfer) {
  transport_->postRecv(peer, static_cast<uint64_t>(tag), call.fingerprint, data, bytes,
                       transfer.request);
}

bool AlgorithmicBackend::waitSome(std::span<Transfer* const> transfers, Deadline deadline) {
  waitingTransfers_.clear();
  for (Transfer* transfer : transfers) waitingTransfers_.push_back(&transfer->request);
  return transport_->waitSome(waitingTransfers_, deadline);
}

bool AlgorithmicBackend::pollTransfers() {
  if (collectiveRunning_)  // its waits move them (and tell their listeners)
    return false;
  transport_->poll();
  return true;
}

void AlgorithmicBackend::abort(std::exception_ptr reason) noexcept { transport_->abort(reason); }

void AlgorithmicBackend::close() noexcept { transport_->close(); }

}  // namespace chorus::backend
