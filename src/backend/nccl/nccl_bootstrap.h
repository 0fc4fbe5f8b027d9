// How the members of a communicator agree on NCCL's unique id (the address of NCCL's own
// rendezvous): member 0 makes it with ncclGetUniqueId and publishes it in the communicator's
// store (chorusrun's rendezvous, scoped to this communicator); the others read it from there.
// Under mpirun (no store) the id travels by MPI_Ibcast over an MPI communicator of the members
// (connector/mpi_comm.h), as in the seed system where MPI initializes NCCL.
//
// Collective over the members; blocks until the id is there or `deadline` passes. Thread-safe as
// the store is.
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

#include "core/deadline.h"
#include "store/store.h"

namespace chorus::backend::nccl {

struct UniqueIdExchange {
  store::Store* store = nullptr;  // scoped to the communicator; null: through MPI
  std::string key;                // unique within the store, e.g. "nccl/unique_id/0"
  int rank = 0;                   // this member's rank in the communicator
  int worldRank = 0;              // this process's world rank (for messages)
  int rootWorldRank = 0;          // member 0's world rank (for messages)
  Deadline deadline = Deadline::never();
};

// Member 0's id, on every member. Errors: TimeoutError naming member 0's world rank when it has
// not published by the deadline; InternalError when the stored value is not an id; NCCL's own
// failure to make an id (checkNccl) on member 0.
ncclUniqueId shareUniqueId(const UniqueIdExchange& exchange);

// The same without a store, through MPI: `worldRanks` are the members' world ranks (in
// communicator rank order) and `scope` names the communicator (both identical on its members).
// UnsupportedError when this build has no MPI; TimeoutError naming member 0 past the deadline.
ncclUniqueId shareUniqueIdOverMpi(const UniqueIdExchange& exchange,
                                  const std::vector<int>& worldRanks,
                                  const std::string& scope);

}  // namespace chorus::backend::nccl
