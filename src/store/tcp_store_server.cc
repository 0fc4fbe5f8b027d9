// TcpStoreServer: serves a HashStore over authenticated TCP connections (see tcp_store.h and
// tcp_store_protocol.h).
//
// Threads: one acceptor, which sleeps in poll(2) on the listener and an eventfd that the destructor
// signals, and one thread per connection. A connection thread first runs the handshake (10 s
// deadline, so a client that stalls mid-handshake holds only its own thread), then serves requests
// until the client disconnects. get() and wait() block in the HashStore in slices of 100 ms, so a
// waiting thread notices server shutdown or a departed client within one slice; a key that appears
// wakes it at once.
//
// Robustness: nothing from a peer is length-parsed before it has passed the handshake; frames over
// kMaxFrameBytes and malformed requests drop that connection only. refusedConnections() counts
// connections dropped for failing the handshake (wrong token, garbage, port scanners, stalls) or
// for breaking the protocol afterwards. The acceptor joins finished connection threads as it goes,
// and the destructor shuts every connection down (shutdown(2)) and joins all threads.
//
// Connection caps: see Note [Store connection limits] (tcp_store.h). The acceptor keeps the
// connections still in the handshake in accept order and, when a new one would pass
// maxUnauthenticated, evicts the oldest by shutting its socket down; its thread then fails the
// handshake at once and ends. A connection's state moves from handshaking to authenticated (its
// own thread) or to evicted (the acceptor) by compare-and-swap, so an authenticated connection is
// never evicted; one evicted in the instant its handshake succeeded is dropped, as if refused.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <list>

#include "core/check.h"
#include "core/error_codec.h"
#include "core/logging.h"
#include "core/net/handshake.h"
#include "store/store_util.h"
#include "store/tcp_store.h"
#include "store/tcp_store_protocol.h"

namespace chorus::store {
namespace {

using namespace std::chrono_literals;
using protocol::Op;
using protocol::ProtocolError;
using protocol::Request;
using protocol::Status;
using protocol::Writer;

constexpr auto kHandshakeTimeout = 10s;
constexpr auto kFrameBodyTimeout = 60s;  // once a length prefix arrived, the rest must follow
constexpr auto kReplyTimeout = 60s;
constexpr auto kWaitSlice = 100ms;

// Ends the wait of a connection whose server is shutting down or whose client left.
struct ConnectionEnded {};

}  // namespace

struct TcpStoreServer::Impl {
  enum State : int { kHandshaking, kAuthenticated, kEvicted };
  struct Connection {
    net::Socket socket;
    std::thread thread;
    std::atomic<int> state{kHandshaking};
    std::atomic<bool> finished{false};
    // Acceptor only: where this connection sits in `handshaking`, while it does.
    bool inHandshaking = false;
    std::list<Connection*>::iterator handshakingPosition;
  };

  std::string token;
  TcpStoreServerLimits limits;
  HashStore store;
  net::Socket listener;
  int wakeFd = -1;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> evicted{0};
  std::atomic<size_t> authenticated{0};  // connections past the handshake and still open
  // Only the acceptor and destructor touch these two. `handshaking` holds the connections of
  // `connections` still in the handshake, oldest first (and, until pruned, some that left it).
  std::list<std::unique_ptr<Connection>> connections;
  std::list<Connection*> handshaking;
  std::thread acceptor;

  void acceptLoop() noexcept;
  void startConnection(net::Socket socket);
  void leaveHandshaking(Connection& connection);
  void pruneHandshaking();
  void evictOldestUnauthenticated();
  void reapFinished();
  void serve(Connection& connection) noexcept;
  void handleRequest(int fd, const protocol::Request& request, Writer& reply);
  // Calls attempt(sliceDeadline) until it returns without TimeoutError or `deadline` passes;
  // returns false on timeout.
  template <typename Attempt>
  bool waitInSlices(int fd, Deadline deadline, Attempt attempt);
};

template <typename Attempt>
bool TcpStoreServer::Impl::waitInSlices(int fd, Deadline deadline, Attempt attempt) {
  while (true) {
    try {
      attempt(Deadline::earliest(deadline, Deadline::after(kWaitSlice)));
      return true;
    } catch (const TimeoutError&) {
      if (deadline.expired())
        return false;
    }
    pollfd entry{fd, POLLRDHUP, 0};
    bool clientLeft = ::poll(&entry, 1, 0) > 0 && (entry.revents & (POLLRDHUP | POLLHUP | POLLERR));
    if (stopping.load() || clientLeft)
      throw ConnectionEnded{};
  }
}

void TcpStoreServer::Impl::handleRequest(int fd, const Request& request, Writer& reply) {
  switch (request.op) {
    case Op::kSet:
      store.set(request.key, request.value);
      reply.u8(uint8_t(Status::kOk));
      return;
    case Op::kGet: {
      Bytes value;
      auto attempt = [&](Deadline slice) { value = store.get(request.key, slice); };
      if (!waitInSlices(fd, request.deadline, attempt)) {
        reply.u8(uint8_t(Status::kTimeout)).strings({request.key});
        return;
      }
      reply.u8(uint8_t(Status::kOk)).bytes(value);
      return;
    }
    case Op::kAdd:
      reply.u8(uint8_t(Status::kOk)).i64(store.add(request.key, request.delta));
      return;
    case Op::kCompareSet:
      reply.u8(uint8_t(Status::kOk))
          .bytes(store.compareSet(request.key, request.value, request.desired));
      return;
    case Op::kWait: {
      auto attempt = [&](Deadline slice) { store.wait(request.keys, slice); };
      if (!waitInSlices(fd, request.deadline, attempt)) {
        std::vector<std::string> missing;
        for (const auto& k : request.keys) {
          if (!store.check({k}))
            missing.push_back(k);
        }
        reply.u8(uint8_t(Status::kTimeout)).strings(missing);
        return;
      }
      reply.u8(uint8_t(Status::kOk));
      return;
    }
    case Op::kCheck:
      reply.u8(uint8_t(Status::kOk)).u8(store.check(request.keys) ? 1 : 0);
      return;
    case Op::kErase:
      reply.u8(uint8_t(Status::kOk)).u8(store.erase(request.key) ? 1 : 0);
      return;
  }
  CHORUS_ASSERT(false && "decodeRequest returned an unknown op");
}

void TcpStoreServer::Impl::serve(Connection& connection) noexcept {
  int fd = connection.socket.fd();
  std::string peer = net::peerAddress(fd);
  try {
    net::serverHandshake(fd, token, "store", 0, Deadline::after(kHandshakeTimeout));
  } catch (const std::exception& error) {
    // Count before closing: a client that sees the close can rely on the count (tests do).
    refused.fetch_add(1);
    if (connection.state.load() == kEvicted) {
      CHORUS_LOG(kInfo) << "the TCP store evicted an unauthenticated connection from " << peer;
    } else if (dynamic_cast<const PeerError*>(&error) != nullptr) {
      // Hung up mid-handshake: port scanners and health checks do this; no warning.
      CHORUS_LOG(kInfo) << "the TCP store refused a connection from " << peer << ": "
                        << error.what();
    } else {
      CHORUS_LOG(kWarn) << "the TCP store refused a connection from " << peer << ": "
                        << error.what();
    }
    ::shutdown(fd, SHUT_RDWR);
    connection.finished.store(true);
    return;
  }
  int handshakingState = kHandshaking;
  if (!connection.state.compare_exchange_strong(handshakingState, kAuthenticated)) {
    // Evicted as its handshake succeeded: the acceptor has shut the socket down already.
    refused.fetch_add(1);
    connection.finished.store(true);
    return;
  }
  authenticated.fetch_add(1);
  accepted.fetch_add(1);
  try {
    while (!stopping.load()) {
      std::vector<uint8_t> payload =
          protocol::recvFrame(fd, Deadline::never(), Deadline::after(kFrameBodyTimeout));
      Request request = protocol::decodeRequest(payload);  // ProtocolError: drop the client
      Writer reply;
      try {
        handleRequest(fd, request, reply);
      } catch (const Error&) {
        // A valid request the store cannot serve (add() on a non-number): the client's error.
        reply = Writer();
        reply.u8(uint8_t(Status::kError)).bytes(detail::encodeError(std::current_exception()));
      }
      protocol::sendFrame(fd, reply, Deadline::after(kReplyTimeout));
    }
  } catch (const ProtocolError& error) {
    refused.fetch_add(1);
    CHORUS_LOG(kWarn) << "the TCP store dropped the connection from " << peer << ": "
                      << error.what();
  } catch (const ConnectionEnded&) {
  } catch (const PeerError&) {
    // The client closed its connection: the normal end.
  } catch (const std::exception& error) {
    if (!stopping.load()) {
      CHORUS_LOG(kWarn) << "the TCP store dropped the connection from " << peer << ": "
                        << error.what();
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  authenticated.fetch_sub(1);
  connection.finished.store(true);
}

void TcpStoreServer::Impl::leaveHandshaking(Connection& connection) {
  if (connection.inHandshaking) {
    handshaking.erase(connection.handshakingPosition);
    connection.inHandshaking = false;
  }
}

void TcpStoreServer::Impl::pruneHandshaking() {
  for (auto it = handshaking.begin(); it != handshaking.end();) {
    Connection& connection = **it++;
    if (connection.state.load() != kHandshaking || connection.finished.load())
      leaveHandshaking(connection);
  }
}

void TcpStoreServer::Impl::evictOldestUnauthenticated() {
  Connection& oldest = *handshaking.front();
  leaveHandshaking(oldest);
  int handshakingState = kHandshaking;
  if (!oldest.state.compare_exchange_strong(handshakingState, kEvicted))
    return;  // it authenticated just now: it stays, and the next oldest goes
  uint64_t count = evicted.fetch_add(1) + 1;
  if (count == 1 || count % 1024 == 0) {
    CHORUS_LOG(kWarn) << "the TCP store evicted an unauthenticated connection from "
                      << net::peerAddress(oldest.socket.fd()) << " to make room ("
                      << limits.maxUnauthenticated << " connections were in the handshake; "
                      << count << " evicted so far): is something scanning the store's port?";
  }
  ::shutdown(oldest.socket.fd(), SHUT_RDWR);
}

void TcpStoreServer::Impl::reapFinished() {
  for (auto it = connections.begin(); it != connections.end();) {
    if ((*it)->finished.load()) {
      leaveHandshaking(**it);
      (*it)->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::Impl::startConnection(net::Socket socket) {
  if (authenticated.load() >= limits.maxAuthenticated) {
    refused.fetch_add(1);
    CHORUS_LOG(kWarn) << "the TCP store refused a connection from " << net::peerAddress(socket.fd())
                      << ": already serving " << limits.maxAuthenticated
                      << " authenticated connections";
    return;
  }
  pruneHandshaking();
  while (handshaking.size() >= limits.maxUnauthenticated) evictOldestUnauthenticated();
  auto connection = std::make_unique<Connection>();
  connection->socket = std::move(socket);
  Connection& ref = *connection;
  connection->thread = std::thread([this, &ref] { serve(ref); });
  ref.handshakingPosition = handshaking.insert(handshaking.end(), &ref);
  ref.inHandshaking = true;
  connections.push_back(std::move(connection));
}

void TcpStoreServer::Impl::acceptLoop() noexcept {
  while (!stopping.load()) {
    pollfd entries[2] = {{listener.fd(), POLLIN, 0}, {wakeFd, POLLIN, 0}};
    if (::poll(entries, 2, -1) < 0)
      continue;  // EINTR
    if (entries[1].revents != 0)
      break;
    reapFinished();
    try {
      // Drain the backlog; acceptTcp with a passed deadline returns an invalid socket when empty.
      while (true) {
        net::Socket socket = net::acceptTcp(listener, Deadline(Clock::now()));
        if (!socket.valid())
          break;
        startConnection(std::move(socket));
      }
    } catch (const std::exception& error) {
      // Out of descriptors or threads: say so and back off rather than spin on the listener.
      CHORUS_LOG(kError) << "the TCP store cannot accept a connection: " << error.what();
      pollfd wake{wakeFd, POLLIN, 0};
      ::poll(&wake, 1, 100);
    }
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host,
                               uint16_t port,
                               std::string token,
                               TcpStoreServerLimits limits)
    : impl_(std::make_unique<Impl>()) {
  CHORUS_CHECK_ARG(!token.empty(), "the TCP store server needs a job token, got an empty one");
  CHORUS_CHECK_ARG(limits.maxAuthenticated >= 1 && limits.maxUnauthenticated >= 1,
                   "the TCP store server needs room for at least one connection of each kind, got "
                   "maxAuthenticated ",
                   limits.maxAuthenticated, " and maxUnauthenticated ", limits.maxUnauthenticated);
  impl_->token = std::move(token);
  impl_->limits = limits;
  impl_->listener = net::listenTcp(host, port);
  impl_->wakeFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  CHORUS_SYSCHECK(impl_->wakeFd);
  impl_->acceptor = std::thread([impl = impl_.get()] { impl->acceptLoop(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stopping.store(true);
  uint64_t one = 1;
  (void)!::write(impl_->wakeFd, &one, sizeof(one));
  impl_->acceptor.join();
  for (auto& connection : impl_->connections) ::shutdown(connection->socket.fd(), SHUT_RDWR);
  for (auto& connection : impl_->connections) connection->thread.join();
  ::close(impl_->wakeFd);
}

uint16_t TcpStoreServer::port() const { return net::boundPort(impl_->listener); }

uint64_t TcpStoreServer::acceptedConnections() const { return impl_->accepted.load(); }

uint64_t TcpStoreServer::refusedConnections() const { return impl_->refused.load(); }

uint64_t TcpStoreServer::evictedConnections() const { return impl_->evicted.load(); }

}  // namespace chorus::store
