// The MPI transport's row of the transport registry. Its ranks find each other through MPI (the
// job was started by mpirun), not through the store: the members' MPI communicator is made from
// their world ranks (connector/mpi_comm.h). Compiled in every build: without CHORUS_WITH_MPI,
// available() is false and createMpiTransport throws UnsupportedError saying how to get it.
#pragma once

#include <memory>

#include "transport/registry.h"
#include "transport/transport.h"

namespace chorus::transport::mpi {

// Whether this build has the MPI transport.
bool available();

// The transport among options.names' world ranks (options.store is not used), by
// options.deadline. See createMpiTransport(MPI_Comm, ...) in transport.h for the rest.
std::unique_ptr<Transport> createMpiTransport(const TransportOptions& options);

}  // namespace chorus::transport::mpi
