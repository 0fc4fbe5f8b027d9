// Helpers for the net and store tests: a connected loopback TCP pair.
#pragma once

#include <chrono>
#include <utility>

#include "core/net/socket.h"

namespace chorus::net::testing {

// A connected (client, server-side) pair of blocking TCP sockets over 127.0.0.1.
inline std::pair<Socket, Socket> connectedPair() {
  Socket listener = listenTcp("127.0.0.1", 0);
  Address address{"127.0.0.1", boundPort(listener)};
  Socket client = connectTcp(address, Deadline::after(std::chrono::seconds(5)));
  Socket server = acceptTcp(listener, Deadline::after(std::chrono::seconds(5)));
  return {std::move(client), std::move(server)};
}

}  // namespace chorus::net::testing
