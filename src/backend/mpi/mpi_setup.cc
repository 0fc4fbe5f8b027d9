// Making the MPI backends: see mpi_setup.h.
#include "backend/mpi/mpi_setup.h"

#include "backend/algorithmic_backend.h"
#include "backend/mpi/mpi_backend.h"
#include "connector/mpi_comm.h"
#include "core/check.h"
#include "transport/mpi/transport.h"

namespace chorus::backend::mpi {

bool available() { return true; }

std::unique_ptr<Backend> createMpiBackend(const BackendOptions& options) {
  CHORUS_CHECK_ARG(static_cast<int>(options.worldRanks.size()) == options.size,
                   "backend 'mpi' needs the world ranks of all ", options.size, " members");
  const detail::RankNames names(options.worldRanks);
  MPI_Comm comm = connector::createMpiComm(options.worldRanks, options.scope, options.deadline);
  try {
    // What MPI cannot do natively runs as chorus's algorithms over a duplicate of `comm`.
    auto fallback = std::make_unique<AlgorithmicBackend>(
        transport::mpi::createMpiTransport(comm, Deadline::never(), names), "mpi_algorithms");
    return std::make_unique<MpiBackend>(comm, std::move(fallback), names, options.deadline);
  } catch (...) {
    MPI_Comm_free(&comm);
    throw;
  }
}

std::unique_ptr<Backend> createMpiAlgorithmsBackend(const BackendOptions& options) {
  CHORUS_CHECK_ARG(static_cast<int>(options.worldRanks.size()) == options.size,
                   "backend 'mpi_algorithms' needs the world ranks of all ", options.size,
                   " members");
  return std::make_unique<AlgorithmicBackend>(
      transport::createTransport("mpi", transportOptionsOf(options, "mpi_algorithms",
                                                           /*needsStore=*/false)),
      "mpi_algorithms");
}

}  // namespace chorus::backend::mpi
