// Connecting the full mesh of a TCP transport: one authenticated socket per pair of ranks.
#pragma once

#include <vector>

#include "core/net/socket.h"
#include "transport/registry.h"

namespace chorus::transport::tcp {

// Every rank listens on options.bindHost (a free port) and publishes "addr/<rank>" = "host:port"
// in options.store. Rank i connects to every rank j < i and accepts from every rank j > i; each
// connection runs the authenticated handshake (Note [Authenticated handshake]) with purpose
// "tcp-transport/<scope>" and the rank as id, so a connection meant for another communicator or job
// cannot join. Connections from impostors (wrong token, wrong scope, wrong or duplicate rank) are
// dropped and the rank keeps accepting; handshakes run concurrently, so a client that stalls holds
// up only itself (Note [Concurrent bootstrap handshakes], bootstrap.cc). The listener is closed
// when this returns.
//
// Returns one blocking socket per rank (the slot of options.rank is empty). Collective: blocks
// until every pair is connected; TimeoutError at options.deadline naming the ranks not connected;
// chorus::Error when a peer rejects this rank's credentials.
std::vector<net::Socket> connectMesh(const TransportOptions& options);

}  // namespace chorus::transport::tcp
