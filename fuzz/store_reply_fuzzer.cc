// Fuzz target: the TCP store client's reply parsing (src/store/tcp_store_client.cc), through the
// real TcpStore talking to a fake server on loopback.
//
// Input: byte 0 picks the first of the seven operations (set, get, add, compareSet, wait, check,
// erase), which the client then calls in turn, twice round; the rest is the reply stream the fake
// server sends after a genuine handshake (4-byte length prefix + payload, repeated), then EOF.
// Each call reads one reply frame. Properties: no sanitizer report, and every failure is a chorus
// error (malformed replies, error replies rebuilt by decodeError, missing keys as TimeoutError,
// the stream's end as PeerError).
#include <cstdint>
#include <string>
#include <thread>

#include "chorus/error.h"
#include "core/net/handshake.h"
#include "fuzz_util.h"
#include "store/tcp_store.h"

namespace {

using namespace std::chrono_literals;
using chorus::Deadline;

const std::string kToken = "fuzz-token";

// Accepts one client, authenticates it, sends `replies` and EOF, and reads until the client leaves.
void fakeServer(const chorus::net::Socket& listener, const uint8_t* replies, size_t size) {
  chorus::net::Socket socket = chorus::net::acceptTcp(listener, Deadline::after(10s));
  CHORUS_FUZZ_REQUIRE(socket.valid());
  socket.setNonBlocking(false);
  chorus::net::serverHandshake(socket.fd(), kToken, "store", 0, Deadline::after(10s));
  chorus::fuzz::writeAll(socket.fd(), replies, size);
  ::shutdown(socket.fd(), SHUT_WR);
  uint8_t sink[4096];
  while (::recv(socket.fd(), sink, sizeof(sink), 0) > 0) {
  }
}

void call(chorus::store::TcpStore& client, int op) {
  const chorus::store::Bytes value{'v'};
  switch (op % 7) {
    case 0:
      client.set("k", value);
      return;
    case 1:
      client.get("k", Deadline::after(10s));
      return;
    case 2:
      client.add("n", 1);
      return;
    case 3:
      client.compareSet("k", value, {'w'});
      return;
    case 4:
      client.wait({"k", "n"}, Deadline::after(10s));
      return;
    case 5:
      client.check({"k"});
      return;
    case 6:
      client.erase("k");
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static chorus::net::Socket listener = chorus::net::listenTcp("127.0.0.1", 0);
  static uint16_t port = chorus::net::boundPort(listener);
  int first = size > 0 ? data[0] : 0;
  const uint8_t* replies = size > 0 ? data + 1 : data;
  size_t replyBytes = size > 0 ? size - 1 : 0;
  std::thread server([&] { fakeServer(listener, replies, replyBytes); });
  {
    chorus::store::TcpStore client({"127.0.0.1", port}, kToken, Deadline::after(10s));
    for (int i = 0; i < 14; ++i) {
      try {
        call(client, first + i);
      } catch (const chorus::Error&) {
      }
    }
  }  // closing the client lets the fake server finish
  server.join();
  return 0;
}
