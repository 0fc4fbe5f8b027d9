// The algorithmic backend: each collective picks a row from its table in src/algorithms/ and runs
// it over a point-to-point transport (tcp, mpi).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algorithms/peers.h"
#include "backend/backend.h"
#include "backend/options.h"
#include "transport/transport.h"

namespace chorus::backend {

// The row "tcp" of the backend table: chorus's algorithms over the tcp transport.
std::unique_ptr<Backend> createTcpBackend(const BackendOptions& options);

class AlgorithmicBackend : public Backend {
 public:
  // `name` is what name() reports (Communicator::backendName()); empty: the transport's name.
  explicit AlgorithmicBackend(std::unique_ptr<transport::Transport> transport,
                              std::string name = {});
  ~AlgorithmicBackend() override;

  std::string name() const override;
  int rank() const override { return transport_->rank(); }
  int size() const override { return transport_->size(); }

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
  bool postsPointToPoint() const override { return true; }
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
  void interruptWait() noexcept override { transport_->interrupt(); }
  // A collective's transport waits move every posted request, the transfers' too (transport.h).
  bool collectivesMoveTransfers() const override { return true; }
  bool pollTransfers() override;
  void wakeCollective() noexcept override { transport_->wake(); }
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;

 private:
  // Selects the row of `table` for `args` and runs it; any failure aborts the transport.
  template <typename Args, typename Table>
  void run(const CallContext& call, Table table, const char* envName, const Args& args);

  std::unique_ptr<transport::Transport> transport_;
  std::string name_;
  Workspace workspace_;
  algorithms::RequestPool requests_;
  std::vector<transport::Request*> waitingTransfers_;  // scratch for waitSome()
  bool collectiveRunning_ = false;                     // in run(): its waits move the transfers
};

}  // namespace chorus::backend
