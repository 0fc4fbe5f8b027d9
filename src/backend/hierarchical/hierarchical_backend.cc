// The hierarchical backend (see hierarchical_backend.h): the node layout, the three-step allreduce
// and barrier, and failure handling.
#include "backend/hierarchical/hierarchical_backend.h"

#include <algorithm>

#include "core/check.h"
#include "core/error_codec.h"

namespace chorus::backend::hierarchical {
namespace {

// "2, 3": the world ranks of a step's members.
std::string rankList(const std::vector<int>& members, const detail::RankNames& names) {
  std::string text;
  for (size_t i = 0; i < members.size(); ++i) {
    text += detail::concat(i == 0 ? "" : ", ", names(members[i]));
  }
  return text;
}

}  // namespace

NodeLayout nodeLayout(const std::vector<std::string>& nodeIds, int rank) {
  CHORUS_ASSERT(rank >= 0 && rank < static_cast<int>(nodeIds.size()));
  NodeLayout layout;
  for (int r = 0; r < static_cast<int>(nodeIds.size()); ++r) {
    const auto first = std::find(nodeIds.begin(), nodeIds.end(), nodeIds[r]);
    if (first - nodeIds.begin() == r)
      layout.leaders.push_back(r);
    if (nodeIds[r] != nodeIds[rank])
      continue;
    if (r == rank)
      layout.localRank = static_cast<int>(layout.nodeMembers.size());
    layout.nodeMembers.push_back(r);
  }
  const auto mine = std::find(layout.leaders.begin(), layout.leaders.end(), layout.nodeMembers[0]);
  layout.nodeIndex = static_cast<int>(mine - layout.leaders.begin());
  return layout;
}

HierarchicalBackend::HierarchicalBackend(NodeLayout layout,
                                         const detail::RankNames& names,
                                         std::unique_ptr<Backend> local,
                                         std::unique_ptr<Backend> leaders,
                                         std::unique_ptr<Backend> flat)
    : layout_(std::move(layout)),
      local_(std::move(local)),
      leaders_(std::move(leaders)),
      flat_(std::move(flat)),
      leaderStep_(nullptr) {
  CHORUS_ASSERT(flat_ != nullptr);
  const int nodes = static_cast<int>(layout_.leaders.size());
  const bool everyNodeAlone = nodes == flat_->size();
  CHORUS_ASSERT((local_ != nullptr) == (layout_.nodeMembers.size() > 1));
  CHORUS_ASSERT((leaders_ != nullptr) == (layout_.isLeader() && nodes > 1 && !everyNodeAlone));
  CHORUS_ASSERT(local_ == nullptr ||
                local_->size() == static_cast<int>(layout_.nodeMembers.size()));
  CHORUS_ASSERT(leaders_ == nullptr || leaders_->size() == nodes);
  if (leaders_ != nullptr)
    leaderStep_ = leaders_.get();
  else if (everyNodeAlone)
    leaderStep_ = flat_.get();
  nodeContext_ = detail::concat("in the shm step among the ranks of node ", layout_.nodeIndex,
                                " (ranks ", rankList(layout_.nodeMembers, names), "): ");
  // The leaders' transport is the flat one's: "tcp", or "mpi" under mpirun.
  leadersContext_ =
      detail::concat("in the ", flat_->name(), " step among the nodes' leaders (ranks ",
                     rankList(layout_.leaders, names), "): ");
}

HierarchicalBackend::~HierarchicalBackend() { close(); }

template <typename Body>
void HierarchicalBackend::guarded(Body&& body) {
  try {
    body();
  } catch (...) {
    abort(std::current_exception());
    throw;
  }
}

template <typename Step>
void HierarchicalBackend::onNode(const CallContext& call, Step&& step) {
  if (local_ == nullptr)
    return;
  try {
    step(*local_, call);
  } catch (...) {
    std::rethrow_exception(detail::withPrefix(std::current_exception(), nodeContext_));
  }
}

template <typename Step>
void HierarchicalBackend::amongLeaders(const CallContext& call, Step&& step) {
  if (leaderStep_ == nullptr)
    return;
  if (leaderStep_ == flat_.get()) {
    step(*flat_, call);  // the leaders are the whole communicator: no step to name
    return;
  }
  try {
    step(*leaderStep_, call);
  } catch (...) {
    std::rethrow_exception(detail::withPrefix(std::current_exception(), leadersContext_));
  }
}

void HierarchicalBackend::allreduce(const CallContext& call, const AllreduceArgs& args) {
  guarded([&] {
    // In place on the output from here: a rank alone on its node has no node step to copy it.
    const size_t bytes = args.count * dataTypeSize(args.dtype);
    copyToOutput(args.input, args.output, bytes);
    onNode(call, [&](Backend& local, const CallContext& step) {
      local.reduce(step, {args.output, args.output, args.count, args.dtype, args.op, 0});
    });
    amongLeaders(call, [&](Backend& leaders, const CallContext& step) {
      leaders.allreduce(step, {args.output, args.output, args.count, args.dtype, args.op});
    });
    onNode(call, [&](Backend& local, const CallContext& step) {
      local.broadcast(step, {args.output, args.output, bytes, 0});
    });
  });
}

void HierarchicalBackend::barrier(const CallContext& call) {
  guarded([&] {
    onNode(call, [&](Backend& local, const CallContext& step) { local.barrier(step); });
    amongLeaders(call, [&](Backend& leaders, const CallContext& step) { leaders.barrier(step); });
    onNode(call, [&](Backend& local, const CallContext& step) { local.barrier(step); });
  });
}

template <typename Args>
void HierarchicalBackend::viaFlat(const CallContext& call,
                                  void (Backend::*collective)(const CallContext&, const Args&),
                                  const Args& args) {
  guarded([&] {
    onNode(call, [&](Backend& local, const CallContext& step) { local.barrier(step); });
    (flat_.get()->*collective)(call, args);
  });
}

void HierarchicalBackend::reduceScatter(const CallContext& call, const ReduceScatterArgs& args) {
  viaFlat(call, &Backend::reduceScatter, args);
}

void HierarchicalBackend::allgather(const CallContext& call, const AllgatherArgs& args) {
  viaFlat(call, &Backend::allgather, args);
}

void HierarchicalBackend::broadcast(const CallContext& call, const BroadcastArgs& args) {
  viaFlat(call, &Backend::broadcast, args);
}

void HierarchicalBackend::reduce(const CallContext& call, const ReduceArgs& args) {
  viaFlat(call, &Backend::reduce, args);
}

void HierarchicalBackend::gather(const CallContext& call, const GatherArgs& args) {
  viaFlat(call, &Backend::gather, args);
}

void HierarchicalBackend::scatter(const CallContext& call, const ScatterArgs& args) {
  viaFlat(call, &Backend::scatter, args);
}

void HierarchicalBackend::allToAll(const CallContext& call, const AllToAllArgs& args) {
  viaFlat(call, &Backend::allToAll, args);
}

void HierarchicalBackend::allToAllV(const CallContext& call, const AllToAllVArgs& args) {
  viaFlat(call, &Backend::allToAllV, args);
}

void HierarchicalBackend::send(
    const CallContext& call, const void* data, size_t bytes, int peer, int tag) {
  guarded([&] { flat_->send(call, data, bytes, peer, tag); });
}

void HierarchicalBackend::recv(
    const CallContext& call, void* data, size_t bytes, int peer, int tag) {
  guarded([&] { flat_->recv(call, data, bytes, peer, tag); });
}

void HierarchicalBackend::postSend(const CallContext& call,
                                   const void* data,
                                   size_t bytes,
                                   int peer,
                                   int tag,
                                   Transfer& transfer) {
  guarded([&] { flat_->postSend(call, data, bytes, peer, tag, transfer); });
}

void HierarchicalBackend::postRecv(
    const CallContext& call, void* data, size_t bytes, int peer, int tag, Transfer& transfer) {
  guarded([&] { flat_->postRecv(call, data, bytes, peer, tag, transfer); });
}

void HierarchicalBackend::wakeCollective() noexcept {
  if (local_ != nullptr)
    local_->wakeCollective();
  if (leaders_ != nullptr)
    leaders_->wakeCollective();
  flat_->wakeCollective();
}

bool HierarchicalBackend::waitSome(std::span<Transfer* const> transfers, Deadline deadline) {
  bool completed = false;
  guarded([&] { completed = flat_->waitSome(transfers, deadline); });
  return completed;
}

void HierarchicalBackend::abort(std::exception_ptr reason) noexcept {
  if (local_ != nullptr)
    local_->abort(reason);
  if (leaders_ != nullptr)
    leaders_->abort(reason);
  flat_->abort(reason);
}

void HierarchicalBackend::close() noexcept {
  if (local_ != nullptr)
    local_->close();
  if (leaders_ != nullptr)
    leaders_->close();
  flat_->close();
}

}  // namespace chorus::backend::hierarchical
