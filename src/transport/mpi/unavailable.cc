// The MPI transport's registry row in a build without MPI (CHORUS_WITH_MPI off): see bootstrap.h.
#include "chorus/error.h"
#include "transport/mpi/bootstrap.h"

namespace chorus::transport::mpi {

bool available() { return false; }

std::unique_ptr<Transport> createMpiTransport(const TransportOptions&) {
  throw UnsupportedError(
      "the MPI transport is not in this build: rebuild chorus with -DCHORUS_WITH_MPI=ON (needs an "
      "MPI library, e.g. libopenmpi-dev)");
}

}  // namespace chorus::transport::mpi
