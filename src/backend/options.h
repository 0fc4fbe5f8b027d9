// What a backend is made from: the communicator's description (BackendOptions), as the runtime's
// communicator factory fills it in, and the transport options derived from it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/deadline.h"
#include "store/store.h"
#include "transport/registry.h"

namespace chorus::backend {

struct BackendOptions {
  // A row of the backend table (factory.h), or "auto" for the table's rule.
  std::string name = "auto";
  int rank = 0;
  int size = 1;
  // The members' world ranks, in communicator rank order (errors name ranks by them, Note [One
  // rank numbering]; the MPI backends build their communicator from them). May be empty for the
  // world communicator.
  std::vector<int> worldRanks;
  // Whether every member runs on this node (the shm backend needs it).
  bool oneNode = true;
  // Member i's node, in communicator rank order (the hierarchical backend groups ranks by it;
  // "auto" chooses between hierarchical and tcp with it). May be empty when oneNode is true.
  std::vector<std::string> nodeIds;
  // Scoped to this communicator (a PrefixStore); null when the job has no store (mpirun); unused
  // for size 1.
  std::shared_ptr<store::Store> store;
  std::string token;
  // Unique per communicator, identical on its ranks; binds its connections' handshakes.
  std::string scope;
  std::string bindHost = "127.0.0.1";
  // The hierarchical backend's transport among nodes (its leaders, and its flat fallback): "tcp",
  // or "mpi" in a job started by mpirun (Note [auto under mpirun]). With "mpi", "auto" also picks
  // the native mpi backend for members that are each alone on their node.
  std::string interNodeTransport = "tcp";
  // The CUDA device ordinal of a device backend (nccl): the device of the tensors it runs.
  int device = 0;
  Deadline deadline = Deadline::never();
};

// The options of a transport among all the members. UnsupportedError when a transport that
// bootstraps through the store is asked for (`needsStore`) and the job has none: it names
// `backend` and what to use instead.
transport::TransportOptions transportOptionsOf(const BackendOptions& options,
                                               std::string_view backend,
                                               bool needsStore = true);

}  // namespace chorus::backend
