// Fuzz target: the TCP store server's request parsing (src/store/tcp_store_protocol.cc).
//
// Input: arbitrary bytes, used twice:
//   1. as one request payload, handed to protocol::decodeRequest (the server's only parser of
//      client bytes). A payload it accepts must re-encode, with the client's Writer, to the same
//      bytes (the timeout field of get and wait is compared by position only: decoding turns it
//      into a deadline);
//   2. as a framed stream (4-byte length prefix + payload, repeated) that a peer sends over a
//      socket: protocol::recvFrame reads frames until the stream ends or a frame is refused, and
//      each payload goes to decodeRequest, as the server's connection loop does.
// Failures must be ProtocolError (malformed) or PeerError (the stream ended); anything else, or a
// sanitizer report, or an allocation beyond libFuzzer's -malloc_limit_mb, is a finding.
#include <cstdint>
#include <vector>

#include "chorus/error.h"
#include "fuzz_util.h"
#include "store/tcp_store.h"
#include "store/tcp_store_protocol.h"

namespace {

using namespace chorus::store::protocol;

// The request's bytes as the client writes them; `timeoutMs` stands for the decoded deadline.
std::vector<uint8_t> reencode(const Request& request, int64_t timeoutMs) {
  Writer writer;
  writer.u8(static_cast<uint8_t>(request.op));
  switch (request.op) {
    case Op::kSet:
      writer.string(request.key).bytes(request.value);
      break;
    case Op::kGet:
      writer.string(request.key).i64(timeoutMs);
      break;
    case Op::kAdd:
      writer.string(request.key).i64(request.delta);
      break;
    case Op::kCompareSet:
      writer.string(request.key).bytes(request.value).bytes(request.desired);
      break;
    case Op::kWait:
      writer.strings(request.keys).i64(timeoutMs);
      break;
    case Op::kCheck:
      writer.strings(request.keys);
      break;
    case Op::kErase:
      writer.string(request.key);
      break;
  }
  const std::vector<uint8_t>& frame = writer.frame();
  return std::vector<uint8_t>(frame.begin() + 4, frame.end());
}

void decodeOnePayload(const std::vector<uint8_t>& payload) {
  Request request;
  try {
    request = decodeRequest(payload);
  } catch (const ProtocolError&) {
    return;
  }
  bool hasTimeout = request.op == Op::kGet || request.op == Op::kWait;
  int64_t timeoutMs = 0;
  if (hasTimeout) {
    CHORUS_FUZZ_REQUIRE(payload.size() >= 8);
    // The timeout is the last field; copy it back so the rest is compared exactly.
    for (int i = 0; i < 8; ++i) {
      timeoutMs |= int64_t{payload[payload.size() - 8 + i]} << (8 * i);
    }
  }
  CHORUS_FUZZ_REQUIRE(reencode(request, timeoutMs) == payload);
}

void decodeStream(const uint8_t* data, size_t size) {
  chorus::fuzz::SocketPair pair;
  pair.sendAndFinish(data, size);
  auto deadline = chorus::Deadline::after(std::chrono::seconds(10));
  try {
    while (true) {
      std::vector<uint8_t> payload = recvFrame(pair.local.fd(), deadline, deadline);
      CHORUS_FUZZ_REQUIRE(payload.size() <= chorus::store::kMaxFrameBytes);
      decodeRequest(payload);
    }
  } catch (const ProtocolError&) {
  } catch (const chorus::PeerError&) {
    // the stream ended
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  decodeOnePayload(std::vector<uint8_t>(data, data + size));
  decodeStream(data, size);
  return 0;
}
