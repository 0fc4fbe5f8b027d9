// Fuzz target: the TCP transport's frame parser, through the real Connection read path
// (src/transport/tcp/connection.cc): FrameHeader magic/kind/bytes checks, matching to posted
// receives, buffering of unexpected messages, abort notices (decoded by detail::decodeError as the
// transport does) and goodbye.
//
// Input layout (the first bytes steer the harness; the rest is the peer's stream, unchanged):
//   byte 0        bytes per write: the stream is written in chunks of (byte0 % 97 + 1) bytes,
//                 with Connection::readSome() after each, so headers and payloads arrive split
//   byte 1        low 2 bits: receives posted before the stream; next 2 bits: receives posted
//                 after it (through recv(), which consumes buffered unexpected messages)
//   3 bytes each  one receive: tag (1 byte) and byte count (u16, little-endian, at most 4096)
//   the rest      the bytes the peer sends; then the peer's end is shut (EOF)
// The harness acts on events as TcpTransport::handle does: kAbort decodes the abort payload, a
// thrown MismatchError or PeerError (malformed frame) fails the connection, kCrashed/kClosed end
// it; after a failure the connection drops its requests and is closed. Properties: no sanitizer
// report, no allocation beyond the malloc limit, only chorus errors thrown, a completed receive's
// buffer is never written past its size (ASan checks the exact-size buffers).
#include <cstdint>
#include <memory>
#include <vector>

#include "chorus/error.h"
#include "core/error_codec.h"
#include "fuzz_util.h"
#include "transport/tcp/connection.h"

namespace {

using chorus::transport::tcp::Connection;
using chorus::transport::tcp::Op;

constexpr size_t kMaxReceiveBytes = 4096;

struct Receive {
  Op op;
  std::unique_ptr<char[]> buffer;  // exactly op.bytes, so ASan sees any overrun
};

// Cuts steering bytes off the front of the input.
class Steering {
 public:
  Steering(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() {
    if (size_ == 0)
      return 0;
    --size_;
    return *data_++;
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

std::vector<std::unique_ptr<Receive>> makeReceives(Steering& in, int count) {
  std::vector<std::unique_ptr<Receive>> receives;
  for (int i = 0; i < count; ++i) {
    auto receive = std::make_unique<Receive>();
    receive->op.peer = 1;
    receive->op.tag = in.byte();
    size_t bytes = in.byte();
    bytes |= size_t{in.byte()} << 8;
    receive->op.bytes = bytes % (kMaxReceiveBytes + 1);
    receive->buffer = std::make_unique<char[]>(receive->op.bytes);
    receive->op.data = receive->buffer.get();
    receives.push_back(std::move(receive));
  }
  return receives;
}

// One readSome() with the transport's reaction; returns false once the connection is finished.
bool progress(Connection& connection) {
  try {
    switch (connection.readSome()) {
      case Connection::Event::kNone:
      case Connection::Event::kGoodbye:
        return true;
      case Connection::Event::kAbort: {
        std::exception_ptr error =
            chorus::detail::decodeError(connection.takeAbortPayload(), "aborted: ", 1);
        CHORUS_FUZZ_REQUIRE(error != nullptr);
        return false;
      }
      case Connection::Event::kCrashed:
      case Connection::Event::kClosed:
        return false;
    }
  } catch (const chorus::Error&) {
    // MismatchError, or PeerError for a malformed frame: the transport fails.
  }
  return false;
}

// Posts receives as the transport's recv() does; a mismatch with a buffered message fails.
bool post(Connection& connection, std::vector<std::unique_ptr<Receive>>& receives) {
  for (auto& receive : receives) {
    try {
      connection.recv(receive->op);
    } catch (const chorus::MismatchError&) {
      return false;
    }
  }
  return true;
}

void run(Steering& in) {
  size_t chunk = in.byte() % 97 + 1;
  uint8_t counts = in.byte();
  auto early = makeReceives(in, counts & 3);
  auto late = makeReceives(in, (counts >> 2) & 3);
  chorus::fuzz::SocketPair pair;
  Connection connection(1, 0, 1, std::move(pair.local));
  bool alive = post(connection, early);
  const uint8_t* stream = in.data();
  size_t left = in.size();
  while (alive && left > 0) {
    size_t now = std::min(chunk, left);
    chorus::fuzz::writeAll(pair.peer.fd(), stream, now);
    stream += now;
    left -= now;
    alive = progress(connection);
  }
  alive = alive && post(connection, late);
  ::shutdown(pair.peer.fd(), SHUT_WR);
  // Every readSome() consumes bytes or ends the stream, so this loop ends.
  while (alive) alive = progress(connection);
  connection.dropRequests();
  connection.closeNow();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Steering in(data, size);
  run(in);
  return 0;
}
