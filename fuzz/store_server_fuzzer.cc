// Fuzz target: a real TcpStoreServer (src/store/tcp_store_server.cc) on loopback, end to end.
//
// Input: arbitrary bytes that an authenticated client sends after the handshake (the stream of
// framed requests: 4-byte length prefix + payload, repeated), then EOF. The harness runs the real
// client handshake, sends the bytes, reads replies until the server closes, and checks that the
// server is still healthy: it must answer a fresh, well-formed client afterwards (so a request
// cannot crash, wedge or poison the server for others). Requests that wait (get, wait on missing
// keys) end within one 100 ms slice once the client's stream has ended.
//
// The server and its HashStore persist across inputs (as in production, where clients come and
// go); it is replaced every kInputsPerServer inputs so the stored keys stay bounded.
#include <poll.h>

#include <cstdint>
#include <memory>
#include <string>

#include "chorus/error.h"
#include "core/logging.h"
#include "core/net/handshake.h"
#include "fuzz_util.h"
#include "store/tcp_store.h"

namespace {

using namespace std::chrono_literals;
using chorus::Deadline;

constexpr int kInputsPerServer = 2000;
const std::string kToken = "fuzz-token";

chorus::net::Socket connectClient(uint16_t port) {
  Deadline deadline = Deadline::after(10s);
  chorus::net::Socket socket = chorus::net::connectTcp({"127.0.0.1", port}, deadline);
  chorus::net::clientHandshake(socket.fd(), kToken, "store", 0, deadline);
  return socket;
}

// Reads until the server closes the connection; a server that holds it open past 10 s is hung.
void drainUntilClosed(int fd) {
  Deadline deadline = Deadline::after(10s);
  uint8_t sink[4096];
  while (true) {
    pollfd entry{fd, POLLIN, 0};
    int ready = ::poll(&entry, 1, deadline.pollTimeoutMs());
    CHORUS_FUZZ_REQUIRE(ready != 0 && "the store server neither replied nor closed within 10 s");
    ssize_t got = ::recv(fd, sink, sizeof(sink), 0);
    if (got <= 0)
      return;
  }
}

// A well-formed round trip through the production client: the server still serves.
void checkHealthy(uint16_t port) {
  chorus::store::TcpStore client({"127.0.0.1", port}, kToken, Deadline::after(10s));
  client.set("fuzz/health", {1, 2, 3});
  CHORUS_FUZZ_REQUIRE(client.get("fuzz/health", Deadline::after(10s)) ==
                      chorus::store::Bytes({1, 2, 3}));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<chorus::store::TcpStoreServer> server;
  static int inputs = 0;
  if (server == nullptr || ++inputs % kInputsPerServer == 0) {
    chorus::log::setThreshold(chorus::log::Level::kError);  // dropped clients are expected here
    server.reset();
    server = std::make_unique<chorus::store::TcpStoreServer>("127.0.0.1", 0, kToken);
  }
  uint16_t port = server->port();
  {
    chorus::net::Socket socket = connectClient(port);
    chorus::fuzz::writeAll(socket.fd(), data, size);
    ::shutdown(socket.fd(), SHUT_WR);
    drainUntilClosed(socket.fd());
  }
  if (inputs % 64 == 0)
    checkHealthy(port);
  return 0;
}
