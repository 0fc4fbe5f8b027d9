// The void backend: a communicator of one rank. Every collective is the identity (outputs receive
// a copy of the inputs where they differ); no connection is opened.
#pragma once

#include "backend/backend.h"

namespace chorus::backend {

class VoidBackend : public Backend {
 public:
  std::string name() const override { return "void"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void allreduce(const CallContext&, const algorithms::AllreduceArgs&) override {}
  void reduceScatter(const CallContext& call, const algorithms::ReduceScatterArgs& args) override;
  void allgather(const CallContext& call, const algorithms::AllgatherArgs& args) override;
  void broadcast(const CallContext&, const algorithms::BroadcastArgs&) override {}
  void reduce(const CallContext& call, const algorithms::ReduceArgs& args) override;
  void gather(const CallContext& call, const algorithms::GatherArgs& args) override;
  void scatter(const CallContext& call, const algorithms::ScatterArgs& args) override;
  void allToAll(const CallContext& call, const algorithms::AllToAllArgs& args) override;
  void barrier(const CallContext&) override {}
  void send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) override;
  void recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) override;
  void abort(std::exception_ptr) noexcept override {}
  void close() noexcept override {}
};

}  // namespace chorus::backend
