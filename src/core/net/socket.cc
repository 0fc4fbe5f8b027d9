// TCP sockets with deadlines (see socket.h).
//
// Every descriptor is close-on-exec, so ranks started by a launcher never inherit another rank's
// connections. Listeners set SO_REUSEADDR (a restarted job can reuse its port at once);
// connections set TCP_NODELAY (store requests and collective headers are small and latency-bound).
// Addresses are resolved with getaddrinfo, so IPv4 and IPv6 both work.
//
// sendAll/recvAll first try the system call without blocking (MSG_DONTWAIT) and only poll(2) when
// the kernel has no room or no data; a transfer that the kernel can serve at once costs one system
// call and no poll. MSG_NOSIGNAL turns a write to a dead peer into EPIPE instead of SIGPIPE.
#include "core/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <thread>

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::net {
namespace {

using std::chrono::milliseconds;

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port. `passive` asks for addresses to bind to (an empty host means "any").
AddrInfoList resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : AI_ADDRCONFIG);
  std::string service = std::to_string(port);
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    throw Error(detail::concat("cannot resolve the address ", Address{host, port}.toString(), ": ",
                               gai_strerror(rc), "; check the host name"));
  }
  return AddrInfoList(result);
}

// "ip:port" of a socket address, for messages.
std::string formatSockaddr(const sockaddr_storage& storage) {
  char text[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (storage.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(storage);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    port = ntohs(in.sin_port);
  } else if (storage.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(storage);
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
      inet_ntop(AF_INET, &in6.sin6_addr.s6_addr[12], text, sizeof(text));
    } else {
      inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
    }
    port = ntohs(in6.sin6_port);
  }
  return Address{text, port}.toString();
}

bool isTransientConnectError(int error) {
  switch (error) {
    case ECONNREFUSED:  // the server is not listening yet
    case ECONNRESET:    // its backlog overflowed
    case ETIMEDOUT:
    case EHOSTUNREACH:  // the network is still coming up
    case ENETUNREACH:
    case EAGAIN:  // out of ephemeral ports for a moment
    case EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

// Waits until `fd` is ready for `events` or `deadline` passes. Returns false on timeout.
bool pollUntil(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    int rc = ::poll(&entry, 1, deadline.pollTimeoutMs());
    if (rc > 0)
      return true;
    if (rc == 0) {
      if (deadline.expired())
        return false;
      continue;  // poll's timeout was clamped; keep waiting
    }
    if (errno != EINTR)
      detail::throwSystemError("poll", errno, __FILE__, __LINE__);
  }
}

// One non-blocking connect attempt to one resolved address, bounded by `deadline`. Returns the
// connected socket, or an invalid one with `error` set to the failure (0 on timeout).
Socket tryConnect(const addrinfo& address, Deadline deadline, int& error) {
  Socket socket(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                         address.ai_protocol));
  if (!socket.valid()) {
    error = errno;
    return Socket();
  }
  if (::connect(socket.fd(), address.ai_addr, address.ai_addrlen) == 0)
    return socket;
  if (errno != EINPROGRESS && errno != EINTR) {
    error = errno;
    return Socket();
  }
  if (!pollUntil(socket.fd(), POLLOUT, deadline)) {
    error = ETIMEDOUT;
    return Socket();
  }
  int soError = 0;
  socklen_t length = sizeof(soError);
  CHORUS_SYSCHECK(getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &soError, &length));
  if (soError != 0) {
    error = soError;
    return Socket();
  }
  return socket;
}

[[noreturn]] void throwClosedByPeer(int fd, const char* doing) {
  throw PeerError(
      detail::concat("the connection to ", peerAddress(fd), " was closed by the peer while ", doing,
                     " (did the peer process exit or crash?)"),
      -1);
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);  // never retried on EINTR: on Linux the descriptor is gone either way
    fd_ = -1;
  }
}

void Socket::setNonBlocking(bool nonBlocking) {
  int flags = fcntl(fd_, F_GETFL);
  CHORUS_SYSCHECK(flags);
  flags = nonBlocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  CHORUS_SYSCHECK(fcntl(fd_, F_SETFL, flags));
}

void Socket::setNoDelay() {
  int one = 1;
  CHORUS_SYSCHECK(setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
}

Address Address::parse(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    CHORUS_CHECK_ARG(
        close != std::string_view::npos && close + 1 < text.size() && text[close + 1] == ':',
        "malformed address \"", text, "\": expected \"[ipv6]:port\"");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    CHORUS_CHECK_ARG(colon != std::string_view::npos, "malformed address \"", text,
                     "\": expected \"host:port\"");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    CHORUS_CHECK_ARG(host.find(':') == std::string_view::npos, "malformed address \"", text,
                     "\": write IPv6 addresses as \"[ipv6]:port\"");
  }
  CHORUS_CHECK_ARG(!host.empty(), "malformed address \"", text, "\": the host is empty");
  unsigned value = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  CHORUS_CHECK_ARG(
      !port.empty() && error == std::errc() && end == port.data() + port.size() && value <= 65535,
      "malformed address \"", text, "\": the port must be a number from 0 to 65535");
  return Address{std::string(host), static_cast<uint16_t>(value)};
}

std::string Address::toString() const {
  if (host.find(':') != std::string::npos)
    return detail::concat("[", host, "]:", port);
  return detail::concat(host, ":", port);
}

Socket listenTcp(const std::string& host, uint16_t port, int backlog) {
  AddrInfoList addresses = resolve(host, port, /*passive=*/true);
  int lastError = 0;
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    Socket socket(
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!socket.valid()) {
      lastError = errno;
      continue;
    }
    int one = 1;
    CHORUS_SYSCHECK(setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
    if (::bind(socket.fd(), a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(socket.fd(), backlog) != 0) {
      lastError = errno;
      continue;
    }
    return socket;
  }
  throw Error(detail::concat("cannot listen on ", Address{host, port}.toString(), ": ",
                             std::strerror(lastError),
                             "; is the port already in use? (port 0 picks a free one)"));
}

uint16_t boundPort(const Socket& listener) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  CHORUS_SYSCHECK(getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&storage), &length));
  if (storage.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(storage).sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in&>(storage).sin_port);
}

std::string localAddress(const Socket& connected) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  CHORUS_SYSCHECK(getsockname(connected.fd(), reinterpret_cast<sockaddr*>(&storage), &length));
  std::string text = formatSockaddr(storage);
  return Address::parse(text).host;
}

std::string peerAddress(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) {
    return "an unknown peer";
  }
  return formatSockaddr(storage);
}

Socket connectTcp(const Address& address, Deadline deadline) {
  milliseconds backoff(5);
  int lastError = 0;
  while (true) {
    AddrInfoList addresses = resolve(address.host, address.port, /*passive=*/false);
    for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      int error = 0;
      Socket socket = tryConnect(*a, deadline, error);
      if (socket.valid()) {
        socket.setNonBlocking(false);
        socket.setNoDelay();
        return socket;
      }
      if (!isTransientConnectError(error)) {
        throw Error(
            detail::concat("cannot connect to ", address.toString(), ": ", std::strerror(error)));
      }
      lastError = error;
    }
    if (deadline.expired())
      break;
    std::this_thread::sleep_for(std::min<milliseconds>(backoff, deadline.remaining()));
    backoff = std::min<milliseconds>(backoff * 2, milliseconds(200));
  }
  throw TimeoutError(detail::concat("timed out connecting to ", address.toString(),
                                    " (last error: ", std::strerror(lastError),
                                    "); is the server running and reachable from this host?"));
}

Socket acceptTcp(const Socket& listener, Deadline deadline) {
  while (true) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      // Best effort: a connection already reset by its client may refuse options; the first
      // transfer on it will report that properly.
      int one = 1;
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return Socket(fd);
    }
    int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) {
      if (!pollUntil(listener.fd(), POLLIN, deadline))
        return Socket();
      continue;
    }
    if (error == ECONNABORTED || error == EPROTO)
      continue;  // the client gave up; not our failure
    detail::throwSystemError("accept4", error, __FILE__, __LINE__);
  }
}

void sendAll(int fd, const void* data, size_t bytes, Deadline deadline) {
  const auto* cursor = static_cast<const uint8_t*>(data);
  size_t left = bytes;
  while (left > 0) {
    ssize_t sent = ::send(fd, cursor, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      cursor += sent;
      left -= static_cast<size_t>(sent);
      continue;
    }
    int error = errno;
    if (error == EINTR)
      continue;
    if (error == EAGAIN || error == EWOULDBLOCK) {
      if (!pollUntil(fd, POLLOUT, deadline)) {
        throw TimeoutError(detail::concat("timed out sending to ", peerAddress(fd), " (",
                                          bytes - left, " of ", bytes,
                                          " bytes sent); the peer is not reading"));
      }
      continue;
    }
    if (error == EPIPE || error == ECONNRESET)
      throwClosedByPeer(fd, "sending");
    detail::throwSystemError("send", error, __FILE__, __LINE__);
  }
}

void recvAll(int fd, void* data, size_t bytes, Deadline deadline) {
  auto* cursor = static_cast<uint8_t*>(data);
  size_t left = bytes;
  while (left > 0) {
    ssize_t received = ::recv(fd, cursor, left, MSG_DONTWAIT);
    if (received > 0) {
      cursor += received;
      left -= static_cast<size_t>(received);
      continue;
    }
    if (received == 0)
      throwClosedByPeer(fd, "receiving");
    int error = errno;
    if (error == EINTR)
      continue;
    if (error == EAGAIN || error == EWOULDBLOCK) {
      if (!pollUntil(fd, POLLIN, deadline)) {
        throw TimeoutError(detail::concat("timed out receiving from ", peerAddress(fd), " (",
                                          bytes - left, " of ", bytes,
                                          " bytes received); the peer went quiet"));
      }
      continue;
    }
    if (error == ECONNRESET || error == EPIPE)
      throwClosedByPeer(fd, "receiving");
    detail::throwSystemError("recv", error, __FILE__, __LINE__);
  }
}

}  // namespace chorus::net
