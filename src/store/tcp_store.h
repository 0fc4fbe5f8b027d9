// The TCP store: a server (run by chorusrun, or by rank 0 under torchrun-style launching) and a
// client Store that talks to it.
//
// Wire protocol: see Note [Authenticated handshake] (src/core/net/handshake.h) — every connection
// starts with it, purpose "store". Then requests and replies are frames: a 4-byte little-endian
// length followed by that many bytes; a frame over kMaxFrameBytes is a protocol error and the
// server drops the connection. The server serves each connection on its own thread; a malformed
// or unauthenticated connection is closed without disturbing the others.
//
// Note [Store connection limits]
// Connections that have not finished the handshake are capped apart from authenticated ones, so
// that anyone who can reach the port (a scanner, a client stalled mid-handshake) cannot use up
// the places of the job's ranks. When the unauthenticated cap is reached, a new connection evicts
// the oldest unauthenticated one (the server shuts it down); a genuine handshake takes
// milliseconds, so the oldest is almost always a stalled one, and a rank gets in unless more than
// maxUnauthenticated connections arrive during its own handshake. Every unauthenticated
// connection also has a handshake deadline (10 s). Only authenticated connections count against
// maxAuthenticated, checked when a connection is accepted: once that many are open, new
// connections are refused (those already in the handshake may still complete, so the number
// open can pass the cap by up to maxUnauthenticated).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/net/socket.h"
#include "store/hash_store.h"
#include "store/store.h"

namespace chorus::store {

inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

// The server's connection caps; see Note [Store connection limits]. Tests lower them.
struct TcpStoreServerLimits {
  size_t maxAuthenticated = 8192;    // connections past the handshake
  size_t maxUnauthenticated = 1024;  // connections still in it; the oldest is evicted when full
};

class TcpStoreServer {
 public:
  // Listens on host:port (port 0: any free port) and serves until destroyed.
  TcpStoreServer(const std::string& host,
                 uint16_t port,
                 std::string token,
                 TcpStoreServerLimits limits = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // Number of connections that passed the handshake, and that were refused (for tests and logs).
  // Refused includes unauthenticated connections evicted to make room (evictedConnections()).
  uint64_t acceptedConnections() const;
  uint64_t refusedConnections() const;
  uint64_t evictedConnections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStore : public Store {
 public:
  // Connects to a server, retrying until `deadline`, and authenticates with `token`.
  TcpStore(const net::Address& address, std::string token, Deadline deadline);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;

  // The local interface address used to reach the server (what peers on other nodes can reach).
  std::string localAddress() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::store
