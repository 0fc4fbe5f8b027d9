// The MPI connector: a job launched by mpirun. Rank and size come from MPI_COMM_WORLD; the node id
// from the processor name (MPI_Get_processor_name, else the host name), or "node<k>" where
// CHORUS_NODE_RANK=k is set (as chorusrun sets it; tests simulate nodes with it); local rank and
// size from the node ids (the ranks of this node in rank order). There is no store and no token
// unless startStore() made them: rank 0 serves a TCP store with a fresh token, sent to the others
// by broadcast, on 127.0.0.1 when the job is on one node, else on rank 0's bind address
// (CHORUS_BIND_ADDR or CHORUS_IFNAME, connector/bind_address.h), which a job across nodes must
// name. DistContext starts it for the store-based backends (shm, tcp, hierarchical), and for
// "auto" when the job is on one node (so "auto" picks shm there) or spans nodes of which some hold
// several ranks and a bind address is named (so "auto" picks hierarchical: Note [auto under
// mpirun]); without it "auto" means "mpi". barrier() and broadcast() run on a private duplicate of
// MPI_COMM_WORLD, so they never match the program's own MPI traffic.
//
// See connector/mpi_environment.h for who initializes and finalizes MPI. Only compiled when
// CHORUS_WITH_MPI is on.
#pragma once

#include <mpi.h>

#include <mutex>

#include "connector/connector.h"
#include "store/tcp_store.h"

namespace chorus::connector {

class MpiConnector : public Connector {
 public:
  // Collective over MPI_COMM_WORLD (duplicates it and gathers every rank's node id).
  MpiConnector();
  ~MpiConnector() override;

  std::string kind() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return localRank_; }
  int localSize() const override { return localSize_; }
  int nodeRank() const override { return nodeRank_; }
  std::string nodeId() const override { return nodeIds_[rank_]; }
  std::vector<std::string> nodeIds() const override { return nodeIds_; }
  std::shared_ptr<store::Store> store() const override { return store_; }
  const std::string& token() const override { return token_; }
  // This rank's bind address (CHORUS_BIND_ADDR or CHORUS_IFNAME), else 127.0.0.1.
  std::string hostAddress() const override;

  void startStore(Deadline deadline) override;
  void barrier(Deadline deadline) override;
  store::Bytes broadcast(const store::Bytes& bytes, int root, Deadline deadline) override;

 private:
  // Gathers every rank's node id, and numbers nodes and the ranks inside each.
  void placeRanks();

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mutex_;  // one barrier/broadcast at a time, so calls match in order across ranks
  int rank_ = 0;
  int size_ = 1;
  int localRank_ = 0;
  int localSize_ = 1;
  int nodeRank_ = 0;
  std::vector<std::string> nodeIds_;
  std::string token_;
  std::shared_ptr<store::TcpStoreServer> server_;  // rank 0, after startStore()
  std::shared_ptr<store::Store> store_;
};

}  // namespace chorus::connector
