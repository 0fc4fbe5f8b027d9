#include "backend/factory.h"

#include "backend/algorithmic_backend.h"
#include "backend/void_backend.h"
#include "core/check.h"
#include "transport/registry.h"

namespace chorus::backend {

std::unique_ptr<Backend> createBackend(const BackendOptions& options) {
  const std::string& name = options.name;
  CHORUS_CHECK_ARG(name == "auto" || name == "tcp" || name == "void", "unknown backend '", name,
                   "'; valid backends in this build: auto, tcp, void (set by CHORUS_BACKEND)");
  // A communicator of one rank needs no connection, whatever the backend.
  if (options.size == 1)
    return std::make_unique<VoidBackend>();
  CHORUS_CHECK_ARG(name != "void", "backend 'void' serves only communicators of size 1, not ",
                   options.size, " ranks");
  transport::TransportOptions transportOptions;
  transportOptions.rank = options.rank;
  transportOptions.size = options.size;
  transportOptions.store = options.store;
  transportOptions.token = options.token;
  transportOptions.scope = options.scope;
  transportOptions.bindHost = options.bindHost;
  transportOptions.deadline = options.deadline;
  return std::make_unique<AlgorithmicBackend>(transport::createTransport("tcp", transportOptions));
}

}  // namespace chorus::backend
