// The shm backend ("shm"): collectives among the ranks of one node through shared memory.
//
// Every collective starts with the arrival round of ShmGroup: each rank publishes its call's
// fingerprint (Note [Collective fingerprint]) and waits for every other rank's, then compares
// them all itself, so a mismatch is a MismatchError on every rank at once (naming both ranks and
// the field), whichever path the call takes next. That round is also the whole barrier.
//
// Native (src/backend/shm/): allreduce. Up to ShmGroup::kSmallSlotBytes the data travels with the
// arrival and every rank reduces all p contributions itself, in rank order (one synchronization;
// see shm_allreduce.cc). Larger vectors go through a pipeline of cache-sized chunks: each rank
// copies a chunk in, reduces its 1/p slice straight out of its peers' slots, and copies every
// reduced slice out. The other collectives and send/recv run chorus's algorithms over the
// `fallback` backend (the shm transport, src/transport/shm/).
//
// Failure: any error fails the group (and the fallback), so every rank raises promptly; a rank
// that died (its pid gone) or closed is a PeerError naming it within about 50 ms of a wait.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/shm/shm_group.h"

namespace chorus::backend::shm {

class ShmBackend : public Backend {
 public:
  ShmBackend(std::unique_ptr<ShmGroup> group, std::unique_ptr<Backend> fallback);
  ~ShmBackend() override;

  std::string name() const override { return "shm"; }
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

  void allreduce(const CallContext& call, const algorithms::AllreduceArgs& args) override;
  void reduceScatter(const CallContext& call, const algorithms::ReduceScatterArgs& args) override;
  void allgather(const CallContext& call, const algorithms::AllgatherArgs& args) override;
  void broadcast(const CallContext& call, const algorithms::BroadcastArgs& args) override;
  void reduce(const CallContext& call, const algorithms::ReduceArgs& args) override;
  void gather(const CallContext& call, const algorithms::GatherArgs& args) override;
  void scatter(const CallContext& call, const algorithms::ScatterArgs& args) override;
  void allToAll(const CallContext& call, const algorithms::AllToAllArgs& args) override;
  void barrier(const CallContext& call) override;
  void send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) override;
  void recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) override;
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;

 private:
  // Runs `body`; any failure fails the group and the fallback, then propagates.
  template <typename Body>
  void guarded(Body&& body);
  // The arrival round, then `collective` of the fallback backend.
  template <typename Args>
  void viaFallback(const CallContext& call,
                   void (Backend::*collective)(const CallContext&, const Args&),
                   const Args& args);
  // The arrival round: publishes the fingerprint (and `bytes` of `data` into this rank's small
  // slot), waits for every rank, and checks their fingerprints. Returns the collective's number.
  uint64_t arrive(const CallContext& call, const void* data, size_t bytes);
  void allreduceSmall(const CallContext& call, const algorithms::AllreduceArgs& args);
  void allreduceChunked(const CallContext& call, const algorithms::AllreduceArgs& args);

  std::unique_ptr<ShmGroup> group_;
  std::unique_ptr<Backend> fallback_;
  uint64_t sequence_ = 0;             // collectives begun
  uint64_t chunkSteps_ = 0;           // chunk steps done (allreduceChunked)
  std::vector<const void*> sources_;  // scratch: one per rank
};

}  // namespace chorus::backend::shm
