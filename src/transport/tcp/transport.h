// The TCP transport: one authenticated socket per pair of ranks, all non-blocking, driven by one
// epoll loop inside wait() (no progress thread). See src/transport/transport.h for the contract.
#pragma once

#include <memory>

#include "transport/registry.h"
#include "transport/transport.h"

namespace chorus::transport::tcp {

// Connects all pairs through options.store (rank i listens; every rank connects to the lower ranks)
// and authenticates each connection. Collective; blocks until done or options.deadline.
std::unique_ptr<Transport> createTcpTransport(const TransportOptions& options);

// Test hook: closes every socket of `transport` (from createTcpTransport) without goodbye, as a
// killed process would; peers fail with PeerError naming this rank. Later calls on it throw.
void crashForTesting(Transport& transport);

}  // namespace chorus::transport::tcp
