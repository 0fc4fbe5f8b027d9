// The MPI communicator behind a chorus communicator over MPI (the MPI transport, the MPI backend):
// how its members find each other when the job was started by mpirun. Only compiled when
// CHORUS_WITH_MPI is on.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "core/deadline.h"

namespace chorus::connector {

// Makes the MPI communicator of a chorus communicator whose members have world ranks `worldRanks`
// (in communicator rank order), with MPI_ERRORS_RETURN set. The whole world in rank order is a
// duplicate of MPI_COMM_WORLD (MPI_Comm_idup, completed by `deadline`); any other member list is
// MPI_Comm_create_group on MPI_COMM_WORLD with a tag derived from `scope` (collective over the
// members only, so it matches how chorus creates groups). MPI has no non-blocking form of it, so it
// has no deadline of its own; chorus calls it only right after the split's allgather on the parent
// communicator (Communicator::split), which has the deadline and which every member has then
// passed, so it waits on MPI alone. (A member that dies in between ends the job under mpirun.)
// The caller owns the result.
MPI_Comm createMpiComm(const std::vector<int>& worldRanks,
                       const std::string& scope,
                       Deadline deadline);

}  // namespace chorus::connector
