// Making the backend of a new communicator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "store/store.h"

namespace chorus::backend {

struct BackendOptions {
  // "auto" (size 1: void; else with a store: shm when every member is on one node, hierarchical
  // when the members span several nodes and some node has several, tcp when every member is alone
  // on its node; without a store: mpi), "shm" (one node only), "tcp", "hierarchical" (shm inside
  // each node and tcp among one leader per node for allreduce and barrier, tcp for the rest; on one
  // node it has no leaders' step, see hierarchical/hierarchical_backend.h), "void" (only for size
  // 1); in builds with CHORUS_WITH_MPI also "mpi" (native MPI collectives) and "mpi_algorithms"
  // (chorus's algorithms over the MPI transport), which need the MPI connector.
  std::string name = "auto";
  int rank = 0;
  int size = 1;
  // The members' world ranks, in communicator rank order (the MPI backends build their
  // communicator from them).
  std::vector<int> worldRanks;
  // Whether every member runs on this node (the shm backend needs it).
  bool oneNode = true;
  // Member i's node, in communicator rank order (the hierarchical backend groups ranks by it;
  // "auto" chooses between hierarchical and tcp with it). May be empty when oneNode is true.
  std::vector<std::string> nodeIds;
  // Scoped to this communicator (a PrefixStore); unused for size 1.
  std::shared_ptr<store::Store> store;
  std::string token;
  // Unique per communicator, identical on its ranks; binds its connections' handshakes.
  std::string scope;
  std::string bindHost = "127.0.0.1";
  Deadline deadline = Deadline::never();
};

// Collective over the communicator's ranks when size > 1 (transports connect through the store;
// the MPI backends through MPI).
std::unique_ptr<Backend> createBackend(const BackendOptions& options);

}  // namespace chorus::backend
