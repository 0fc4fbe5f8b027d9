// Small helpers shared by the fuzz targets (fuzz/*_fuzzer.cc): a socketpair that plays the peer,
// and a check that stops the fuzzer with a message when a property of the code under test fails.
//
// Not thread-safe; each helper is used by one thread at a time. Nothing here parses the bytes under
// test: the targets hand them to the production parsers unchanged.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/net/socket.h"

namespace chorus::fuzz {

// A property of the code under test does not hold: report it as a crash (libFuzzer saves the
// input that caused it).
#define CHORUS_FUZZ_REQUIRE(cond)                                                      \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// Writes all of `size` bytes to a blocking socket; the inputs are far smaller than a socket's
// buffer, so this never waits on the reader. Returns false if the other end is gone.
inline bool writeAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR)
      continue;
    if (sent <= 0)
      return false;
    data += sent;
    size -= static_cast<size_t>(sent);
  }
  return true;
}

// A connected AF_UNIX stream pair: `peer` is the fuzzer's end, `local` the end under test.
struct SocketPair {
  SocketPair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      std::perror("socketpair");
      std::abort();
    }
    peer = net::Socket(fds[0]);
    local = net::Socket(fds[1]);
  }
  // Sends `data` from the peer's end, then ends the peer's stream (the reader sees EOF after it).
  void sendAndFinish(const uint8_t* data, size_t size) {
    writeAll(peer.fd(), data, size);
    ::shutdown(peer.fd(), SHUT_WR);
  }
  net::Socket peer;
  net::Socket local;
};

}  // namespace chorus::fuzz
