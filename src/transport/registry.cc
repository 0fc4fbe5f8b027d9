// Making transports by name: one row per transport, in a table.
#include "transport/registry.h"

#include "core/check.h"
#include "transport/faulty/transport.h"
#include "transport/mpi/bootstrap.h"
#include "transport/shm/transport.h"
#include "transport/tcp/transport.h"

namespace chorus::transport {
namespace {

bool always() { return true; }

struct TransportInfo {
  std::string_view name;
  bool (*available)();  // in this build
  std::unique_ptr<Transport> (*create)(const TransportOptions& options);
};

// The loopback transport is not here: it connects threads of one process and is made as a group
// (loopback::createLoopbackGroup), not rank by rank. The faulty transport wraps another.
constexpr TransportInfo kTransports[] = {
    {"tcp", always, tcp::createTcpTransport},          // any nodes; bootstraps through the store
    {"shm", always, shm::createShmTransport},          // one node; bootstraps through the store
    {"mpi", mpi::available, mpi::createMpiTransport},  // bootstraps through MPI (mpirun)
};

}  // namespace

std::unique_ptr<Transport> createTransport(std::string_view name, const TransportOptions& options) {
  for (const auto& info : kTransports) {
    if (info.name != name)
      continue;
    std::unique_ptr<Transport> transport = info.create(options);
    if (auto fault = faulty::faultFromEnvironment(options.rank))
      return std::make_unique<faulty::FaultyTransport>(std::move(transport), *fault);
    return transport;
  }
  std::string known;
  for (const auto& info : kTransports) {
    if (info.available())
      known += detail::concat(known.empty() ? "" : ", ", info.name);
  }
  CHORUS_CHECK_ARG(false, "rank ", options.names(options.rank),
                   " (this process): unknown transport '", name,
                   "'; the transports in this build: ", known);
  return nullptr;
}

}  // namespace chorus::transport
