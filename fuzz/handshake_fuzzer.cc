// Fuzz target: the server side of the authenticated handshake (src/core/net/handshake.cc), which
// every store and transport connection runs before any other byte is parsed.
//
// Input: arbitrary bytes that a would-be client sends, then EOF. The handshake reads only
// fixed-size messages, so the properties are simple: no sanitizer report, and the handshake
// refuses (chorus::Error: wrong magic, wrong proof, or PeerError when the bytes run out) rather
// than accepts, since the fuzzer cannot forge an HMAC over the server's fresh nonce.
#include <cstdint>

#include "chorus/error.h"
#include "core/net/handshake.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorus::fuzz::SocketPair pair;
  pair.sendAndFinish(data, size);
  bool accepted = false;
  try {
    chorus::net::serverHandshake(pair.local.fd(), "fuzz-token", "store", 0,
                                 chorus::Deadline::after(std::chrono::seconds(10)));
    accepted = true;
  } catch (const chorus::Error&) {
  }
  CHORUS_FUZZ_REQUIRE(!accepted);
  return 0;
}
