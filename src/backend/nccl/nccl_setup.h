// The nccl backend's row of the backend table: NCCL collectives on CUDA tensors. Compiled in every
// build: without CHORUS_WITH_NCCL, available() is false and createNcclBackend throws
// UnsupportedError saying how to get it (nccl_unavailable.cc).
//
// createNcclBackend is collective over the communicator's members: member 0 makes NCCL's unique
// id and the store carries it, or MPI under mpirun (nccl_bootstrap.h), then each member joins a
// non-blocking NCCL communicator on CUDA device options.device. Errors: UnsupportedError when this
// process sees no GPU (CUDA's reason), or the job has no store and the build no MPI;
// InvalidArgumentError for a device this process does not see; TimeoutError when the members do not
// all arrive by options.deadline.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/options.h"

namespace chorus::backend::nccl {

// Whether this build has the nccl backend.
bool available();

std::unique_ptr<Backend> createNcclBackend(const BackendOptions& options);

}  // namespace chorus::backend::nccl
