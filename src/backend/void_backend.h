// The void backend: a communicator of one rank. Every collective is the identity (outputs receive
// a copy of the inputs where they differ); no connection is opened.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/options.h"

namespace chorus::backend {

class VoidBackend : public Backend {
 public:
  std::string name() const override { return "void"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void allreduce(const CallContext& call, const AllreduceArgs& args) override;
  void reduceScatter(const CallContext& call, const ReduceScatterArgs& args) override;
  void allgather(const CallContext& call, const AllgatherArgs& args) override;
  void broadcast(const CallContext& call, const BroadcastArgs& args) override;
  void reduce(const CallContext& call, const ReduceArgs& args) override;
  void gather(const CallContext& call, const GatherArgs& args) override;
  void scatter(const CallContext& call, const ScatterArgs& args) override;
  void allToAll(const CallContext& call, const AllToAllArgs& args) override;
  void allToAllV(const CallContext& call, const AllToAllVArgs& args) override;
  void barrier(const CallContext&) override {}
  void send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) override;
  void recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) override;
  void abort(std::exception_ptr) noexcept override {}
  void close() noexcept override {}
};

// The row "void" of the backend table: only for a communicator of one rank (InvalidArgumentError
// otherwise).
std::unique_ptr<Backend> createVoidBackend(const BackendOptions& options);

}  // namespace chorus::backend
