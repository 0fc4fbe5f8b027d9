// TCP sockets with deadlines: an owning Socket, listen/connect helpers, and blocking-with-deadline
// transfers built on poll(2). Used by the TCP store and the TCP transport.
//
// Errors: a closed or reset connection is PeerError (peer rank -1: the caller knows which rank it
// is and rethrows with it); a passed deadline is TimeoutError; other failures are chorus::Error
// naming the system call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/deadline.h"

namespace chorus::net {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close() noexcept;
  void setNonBlocking(bool nonBlocking);
  void setNoDelay();

 private:
  int fd_ = -1;
};

struct Address {
  std::string host;
  uint16_t port = 0;

  // "host:port"; IPv6 as "[::1]:port". Malformed input is InvalidArgumentError.
  static Address parse(std::string_view text);
  std::string toString() const;
};

// Listens on host:port (port 0 picks a free one). The socket is non-blocking, close-on-exec.
Socket listenTcp(const std::string& host, uint16_t port, int backlog = 1024);
// The port a listening socket is bound to.
uint16_t boundPort(const Socket& listener);
// The local IP address of a connected socket (the interface that reaches its peer).
std::string localAddress(const Socket& connected);
// "ip:port" of a connected socket's peer, for messages ("an unknown peer" when the system cannot
// say).
std::string peerAddress(int fd);
// Connects, retrying refused connections until `deadline` (the server may still be starting).
// The returned socket is blocking, with TCP_NODELAY, close-on-exec.
Socket connectTcp(const Address& address, Deadline deadline);
// Accepts one connection, waiting until `deadline`. Returns an invalid Socket on timeout.
Socket acceptTcp(const Socket& listener, Deadline deadline);

// Blocking transfers that give up at `deadline`. They work on blocking and non-blocking sockets.
void sendAll(int fd, const void* data, size_t bytes, Deadline deadline);
void recvAll(int fd, void* data, size_t bytes, Deadline deadline);

}  // namespace chorus::net
