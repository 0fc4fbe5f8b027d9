// The MPI backends' rows in a build without MPI (CHORUS_WITH_MPI off): see mpi_setup.h.
#include "backend/mpi/mpi_setup.h"
#include "chorus/error.h"

namespace chorus::backend::mpi {
namespace {

[[noreturn]] void notInThisBuild(const BackendOptions& options) {
  throw UnsupportedError("backend '" + options.name +
                         "' is not in this build: rebuild chorus with -DCHORUS_WITH_MPI=ON "
                         "(needs an MPI library, e.g. libopenmpi-dev)");
}

}  // namespace

bool available() { return false; }

std::unique_ptr<Backend> createMpiBackend(const BackendOptions& options) {
  notInThisBuild(options);
}

std::unique_ptr<Backend> createMpiAlgorithmsBackend(const BackendOptions& options) {
  notInThisBuild(options);
}

}  // namespace chorus::backend::mpi
