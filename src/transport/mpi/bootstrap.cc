// The MPI transport's registry row: see bootstrap.h.
#include "transport/mpi/bootstrap.h"

#include "connector/mpi_comm.h"
#include "transport/mpi/transport.h"

namespace chorus::transport::mpi {

bool available() { return true; }

std::unique_ptr<Transport> createMpiTransport(const TransportOptions& options) {
  std::vector<int> worldRanks(options.size);
  for (int member = 0; member < options.size; ++member) worldRanks[member] = options.names(member);
  MPI_Comm comm = connector::createMpiComm(worldRanks, options.scope, options.deadline);
  try {
    auto transport = createMpiTransport(comm, options.deadline, options.names);
    MPI_Comm_free(&comm);  // the transport works on its own duplicate
    return transport;
  } catch (...) {
    MPI_Comm_free(&comm);
    throw;
  }
}

}  // namespace chorus::transport::mpi
