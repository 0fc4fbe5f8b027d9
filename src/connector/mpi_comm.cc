// The MPI communicator of a chorus communicator: see mpi_comm.h.
#include "connector/mpi_comm.h"

#include <functional>

#include "connector/mpi_environment.h"
#include "core/check.h"

namespace chorus::connector {

MPI_Comm createMpiComm(const std::vector<int>& worldRanks,
                       const std::string& scope,
                       Deadline deadline) {
  ensureMpiInitialized();
  int worldRank = 0;
  int worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  bool wholeWorld = static_cast<int>(worldRanks.size()) == worldSize;
  for (int i = 0; wholeWorld && i < worldSize; ++i) wholeWorld = worldRanks[i] == i;
  MPI_Comm comm = MPI_COMM_NULL;
  if (wholeWorld) {
    MPI_Request request = MPI_REQUEST_NULL;
    checkMpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request), "MPI_Comm_idup");
    waitMpiRequest(
        request, deadline,
        detail::concat("rank ", worldRank,
                       " (this process) timed out creating the world communicator: some rank of "
                       "the MPI job did not join"));
  } else {
    MPI_Group world = MPI_GROUP_NULL;
    MPI_Group members = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, static_cast<int>(worldRanks.size()), worldRanks.data(), &members);
    // MPI guarantees tags up to 32767; the tag only separates creations running at the same time.
    const int tag = static_cast<int>(std::hash<std::string>{}(scope) % 32768);
    const int code = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&world);
    checkMpi(code, "MPI_Comm_create_group");
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return comm;
}

}  // namespace chorus::connector
