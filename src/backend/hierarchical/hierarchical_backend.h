// The hierarchical backend ("hierarchical"): collectives for a communicator whose members span
// several nodes, using shared memory inside each node and tcp between nodes.
//
// Each node's leader is its lowest communicator rank. Three sub-backends, each with its own store
// scope and connections:
//   local   the node's members (a ShmBackend; absent on a node with one member),
//   leaders one rank per node (tcp; absent on non-leaders and with one node; when every node has
//           one member the flat backend serves as it),
//   flat    the whole communicator (tcp).
//
// allreduce = reduce onto the leader over `local`, allreduce among the leaders over `leaders`,
// broadcast from the leader over `local`: the bytes cross the network once per node instead of
// once per rank. barrier = local barrier, leaders' barrier, local barrier. Every other collective
// runs over `flat` after a local arrival (a barrier of `local` carrying the call's fingerprint);
// send/recv run over `flat` directly.
//
// Mismatches (Note [Collective fingerprint]): the first step of every collective compares the
// fingerprints of a node's members (the shm arrival); allreduce and barrier then compare the
// leaders' (the tcp messages), so any two members of the communicator are compared, directly or
// through their leaders. A mismatch between ranks on different nodes is therefore seen by at least
// one leader or one node, and the failure handling below carries it to every rank as a
// MismatchError. Different collectives called on different nodes (say allreduce on node 0 and
// allgather on node 1) meet on different connections and never compare fingerprints; the stalled
// ranks' census finds them (Note [Census agreement]) and each raises a MismatchError.
//
// Failure: any error in any sub-backend aborts all three with it before it propagates, so every
// rank raises promptly (a mismatch seen among the leaders reaches non-leaders waiting in the local
// broadcast as the same type of error). Errors from `local` and `leaders` are prefixed with the
// step they come from. Each sub-backend names ranks by their world ranks (Note [One rank
// numbering]), so an error reads the same whichever step raised it or passed it on. abort() and
// close() go to all three.
//
// On one node (only when asked for by name) there is no leaders' step: allreduce is a shm reduce
// plus a shm broadcast, and the rest runs over tcp. Backend "shm" is the better choice there.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/options.h"
#include "core/rank_names.h"

namespace chorus::backend::hierarchical {

// The row "hierarchical" of the backend table: needs options.nodeIds for every member. Every rank
// makes the flat backend first, then its node's, then (leaders) the leaders', so no setup waits on
// a rank busy with a later one.
std::unique_ptr<Backend> createHierarchicalBackend(const BackendOptions& options);

// Where one rank sits among the nodes of its communicator.
struct NodeLayout {
  std::vector<int> nodeMembers;  // communicator ranks on this rank's node, ascending
  std::vector<int> leaders;      // every node's leader (its lowest rank), ascending
  int nodeIndex = 0;             // this node's position in `leaders`
  int localRank = 0;             // this rank's position in `nodeMembers`; 0 is the leader

  bool isLeader() const { return localRank == 0; }
};

// The layout of `rank` when member i of the communicator runs on node nodeIds[i].
NodeLayout nodeLayout(const std::vector<std::string>& nodeIds, int rank);

class HierarchicalBackend : public Backend {
 public:
  // `local` spans layout.nodeMembers (null when that is one rank); `leaders` spans layout.leaders
  // and exists only on leaders, when there are several nodes and some node has several members;
  // `flat` spans the whole communicator. `names` gives the communicator's members' world ranks,
  // for the steps' error prefixes.
  HierarchicalBackend(NodeLayout layout,
                      const detail::RankNames& names,
                      std::unique_ptr<Backend> local,
                      std::unique_ptr<Backend> leaders,
                      std::unique_ptr<Backend> flat);
  ~HierarchicalBackend() override;

  std::string name() const override { return "hierarchical"; }
  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }

  void allreduce(const CallContext& call, const AllreduceArgs& args) override;
  void reduceScatter(const CallContext& call, const ReduceScatterArgs& args) override;
  void allgather(const CallContext& call, const AllgatherArgs& args) override;
  void broadcast(const CallContext& call, const BroadcastArgs& args) override;
  void reduce(const CallContext& call, const ReduceArgs& args) override;
  void gather(const CallContext& call, const GatherArgs& args) override;
  void scatter(const CallContext& call, const ScatterArgs& args) override;
  void allToAll(const CallContext& call, const AllToAllArgs& args) override;
  void allToAllV(const CallContext& call, const AllToAllVArgs& args) override;
  void barrier(const CallContext& call) override;
  void send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) override;
  void recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) override;
  // Point-to-point goes through flat_, which may post it.
  bool postsPointToPoint() const override { return flat_->postsPointToPoint(); }
  void postSend(const CallContext& call,
                const void* data,
                size_t bytes,
                int peer,
                int tag,
                Transfer& transfer) override;
  void postRecv(const CallContext& call,
                void* data,
                size_t bytes,
                int peer,
                int tag,
                Transfer& transfer) override;
  bool waitSome(std::span<Transfer* const> transfers, Deadline deadline) override;
  void interruptWait() noexcept override { flat_->interruptWait(); }
  void wakeCollective() noexcept override;  // every step's
  // Transfers go over flat_: its own collectives move them, and the node and leaders steps' waits
  // call the call's whileWaiting, which polls them (pollTransfers).
  bool collectivesMoveTransfers() const override { return flat_->collectivesMoveTransfers(); }
  bool pollTransfers() override { return flat_->pollTransfers(); }
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;

 private:
  // Runs `body`; any failure aborts every sub-backend with it, then propagates.
  template <typename Body>
  void guarded(Body&& body);
  // Runs `step` of `local_` (or `leaders`), saying in its errors which step they come from.
  template <typename Step>
  void onNode(const CallContext& call, Step&& step);
  template <typename Step>
  void amongLeaders(const CallContext& call, Step&& step);
  // A local arrival, then `collective` of the flat backend.
  template <typename Args>
  void viaFlat(const CallContext& call,
               void (Backend::*collective)(const CallContext&, const Args&),
               const Args& args);

  NodeLayout layout_;
  std::unique_ptr<Backend> local_;
  std::unique_ptr<Backend> leaders_;
  std::unique_ptr<Backend> flat_;
  Backend* leaderStep_;  // leaders_, or flat_ when every node has one member; null on non-leaders
  std::string nodeContext_;     // message prefixes naming the step and its members
  std::string leadersContext_;  // (see onNode / amongLeaders)
};

}  // namespace chorus::backend::hierarchical
