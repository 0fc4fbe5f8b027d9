// Making transports by name: one row per transport, in a table.
#include "transport/registry.h"

#include "core/check.h"
#include "transport/faulty/transport.h"
#include "transport/shm/transport.h"
#include "transport/tcp/transport.h"

namespace chorus::transport {
namespace {

struct TransportInfo {
  std::string_view name;
  std::unique_ptr<Transport> (*create)(const TransportOptions& options);
};

// The loopback transport is not here: it connects threads of one process and is made as a group
// (loopback::createLoopbackGroup), not rank by rank.
constexpr TransportInfo kTransports[] = {
    {"tcp", tcp::createTcpTransport},
    {"shm", shm::createShmTransport},
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
  for (const auto& info : kTransports)
    known += detail::concat(known.empty() ? "" : ", ", info.name);
  CHORUS_CHECK_ARG(false, "rank ", options.rank, " (this process): unknown transport '", name,
                   "'; known transports: ", known);
  return nullptr;
}

}  // namespace chorus::transport
