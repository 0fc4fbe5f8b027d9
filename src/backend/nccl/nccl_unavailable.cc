// The nccl backend's row in a build without NCCL (CHORUS_WITH_NCCL off): see nccl_setup.h.
#include "backend/nccl/nccl_setup.h"
#include "chorus/error.h"

namespace chorus::backend::nccl {

bool available() { return false; }

std::unique_ptr<Backend> createNcclBackend(const BackendOptions& options) {
  throw UnsupportedError("backend '" + options.name +
                         "' is not in this build: rebuild chorus with -DCHORUS_WITH_NCCL=ON "
                         "(needs the CUDA toolkit and NCCL, e.g. CUDA's nccl.h and libnccl)");
}

}  // namespace chorus::backend::nccl
