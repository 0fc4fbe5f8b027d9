// The MPI backends' rows of the backend table: "mpi" (native MPI collectives, with chorus's
// algorithms over the MPI transport for what MPI cannot do natively) and "mpi_algorithms"
// (chorus's algorithms over the MPI transport alone). Both find their members through MPI (jobs
// started by mpirun) and need options.worldRanks. Compiled in every build: without
// CHORUS_WITH_MPI, available() is false and the create functions throw UnsupportedError saying how
// to get them.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/options.h"

namespace chorus::backend::mpi {

// Whether this build has the MPI backends.
bool available();

std::unique_ptr<Backend> createMpiBackend(const BackendOptions& options);
std::unique_ptr<Backend> createMpiAlgorithmsBackend(const BackendOptions& options);

}  // namespace chorus::backend::mpi
