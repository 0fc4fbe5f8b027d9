// The TCP transport: a full mesh of authenticated sockets (tcp/bootstrap.cc), each a Connection
// (tcp/connection.cc), driven by one epoll loop inside wait(). No progress thread: the thread that
// waits moves every connection's bytes, so ranks that send to each other never deadlock, and a
// peer that dies is noticed while waiting on anyone.
//
// Failure (see the contract in transport.h): the first error is kept; pending requests are
// forgotten (half-written frames are finished with zeros so the stream stays parsable); the error
// is sent to every live peer in an abort frame, ahead of this rank's goodbye, also when it came in
// a peer's abort frame or from a peer's crash: a third rank may hear this rank's goodbye before
// the failed rank's own abort frame or end of stream (the aborting rank writes its frames one
// peer at a time, and may lose the core in between), and would then blame this rank. The first
// error wins on every rank, so forwarded frames end there. abort() from another thread
// takes the lock (the waiter drops it while in epoll_wait) and wakes the waiter through an
// eventfd in the epoll set.
//
// Cost per message: one sendmsg for header and payload on the sender, one or two recv on the
// receiver (small frames share one recv); large payloads land in the receive buffer directly.
#include "transport/tcp/transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "core/check.h"
#include "core/error_codec.h"
#include "core/stall_watch.h"
#include "transport/op_pool.h"
#include "transport/tcp/bootstrap.h"
#include "transport/tcp/connection.h"

namespace chorus::transport::tcp {
namespace {

constexpr uint32_t kWakeId = UINT32_MAX;
constexpr int kMaxEvents = 64;
// close() gives the goodbye frames this long to leave.
constexpr std::chrono::milliseconds kGoodbyeTimeout{1000};

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, detail::RankNames names, std::vector<net::Socket> sockets);
  ~TcpTransport() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "tcp"; }

  void postSend(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                const void* data,
                size_t bytes,
                Request& request) override;
  void postRecv(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                void* data,
                size_t bytes,
                Request& request) override;
  void wait(std::span<Request* const> requests, Deadline deadline) override;
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;
  std::exception_ptr failure() const override;

  // Test hook: close every socket without goodbye, as a killed process would.
  void crash() noexcept;

 private:
  [[noreturn]] void rethrowFailure() const { std::rethrow_exception(failure_); }
  Op& addOp(int peer,
            uint64_t tag,
            const Fingerprint& fingerprint,
            void* data,
            size_t bytes,
            Request& request);
  bool allComplete(std::span<Op* const> ops);
  void dispatch(const epoll_event& event);
  void handle(Connection& connection, Connection::Event event);
  void updateInterest(Connection& connection);
  void failLocked(std::exception_ptr error, bool tellPeers) noexcept;
  void closeFds() noexcept;

  const int rank_;
  const int size_;
  const detail::RankNames names_;                         // Note [One rank numbering]
  std::vector<std::unique_ptr<Connection>> connections_;  // by rank; null for this rank
  std::vector<bool> writeInterest_;
  int epollFd_ = -1;
  int wakeFd_ = -1;

  mutable std::mutex mutex_;
  std::exception_ptr failure_;
  bool closed_ = false;
  // Ops are pooled so the hot path does not allocate; pending ones are few, searched linearly.
  OpPool<Op> ops_;
  std::vector<Op*> waitOps_;    // scratch for wait()
  std::vector<int> waitingOn_;  // scratch for wait()
};

TcpTransport::TcpTransport(int rank,
                           int size,
                           detail::RankNames names,
                           std::vector<net::Socket> sockets)
    : rank_(rank),
      size_(size),
      names_(std::move(names)),
      connections_(size),
      writeInterest_(size, false) {
  epollFd_ = ::epoll_create1(EPOLL_CLOEXEC);
  CHORUS_SYSCHECK(epollFd_);
  wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    int error = errno;
    closeFds();
    detail::throwSystemError("eventfd", error, __FILE__, __LINE__);
  }
  try {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = kWakeId;
    CHORUS_SYSCHECK(::epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &event));
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank)
        continue;
      connections_[peer] =
          std::make_unique<Connection>(peer, names_(rank), names_(peer), std::move(sockets[peer]));
      event.events = EPOLLIN;
      event.data.u32 = static_cast<uint32_t>(peer);
      CHORUS_SYSCHECK(::epoll_ctl(epollFd_, EPOLL_CTL_ADD, connections_[peer]->fd(), &event));
    }
  } catch (...) {
    closeFds();
    throw;
  }
}

void TcpTransport::closeFds() noexcept {
  if (epollFd_ >= 0)
    ::close(epollFd_);
  if (wakeFd_ >= 0)
    ::close(wakeFd_);
  epollFd_ = wakeFd_ = -1;
}

Op& TcpTransport::addOp(int peer,
                        uint64_t tag,
                        const Fingerprint& fingerprint,
                        void* data,
                        size_t bytes,
                        Request& request) {
  if (failure_)
    rethrowFailure();
  Op* op = &ops_.acquire(rank_, size_, peer, data, bytes, request);
  *op = Op{&request, false, false, peer, tag, fingerprint, static_cast<char*>(data), bytes};
  return *op;
}

void TcpTransport::postSend(int peer,
                            uint64_t tag,
                            const Fingerprint& fingerprint,
                            const void* data,
                            size_t bytes,
                            Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  Op& op = addOp(peer, tag, fingerprint, const_cast<void*>(data), bytes, request);
  op.isSend = true;
  try {
    Connection& connection = *connections_[peer];
    handle(connection, connection.send(op));
    updateInterest(connection);
  } catch (...) {
    failLocked(std::current_exception(), /*tellPeers=*/true);
    rethrowFailure();
  }
}

void TcpTransport::postRecv(int peer,
                            uint64_t tag,
                            const Fingerprint& fingerprint,
                            void* data,
                            size_t bytes,
                            Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  Op& op = addOp(peer, tag, fingerprint, data, bytes, request);
  try {
    connections_[peer]->recv(op);
  } catch (...) {
    failLocked(std::current_exception(), /*tellPeers=*/true);
    rethrowFailure();
  }
}

// True when every op is complete; otherwise fills waitingOn_ with the peers still owing something
// (their world ranks, for the stall report and the TimeoutError).
// Throws PeerError when an op waits on a peer that said goodbye.
bool TcpTransport::allComplete(std::span<Op* const> ops) {
  waitingOn_.clear();
  for (Op* op : ops) {
    if (op == nullptr || op->complete)
      continue;
    auto state = connections_[op->peer]->state();
    if (state == Connection::State::kSaidGoodbye || state == Connection::State::kClosed) {
      throw PeerError(
          detail::concat("rank ", names_(rank_), " (this process): rank ", names_(op->peer),
                         " has closed its communicator, so a ",
                         op->isSend ? "send to" : "receive from", " it cannot complete"),
          names_(op->peer));
    }
    waitingOn_.push_back(names_(op->peer));
  }
  return waitingOn_.empty();
}

void TcpTransport::wait(std::span<Request* const> requests, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (failure_)
    rethrowFailure();
  waitOps_.clear();
  for (Request* request : requests) {
    Op* op = ops_.find(request);
    CHORUS_CHECK_ARG(op != nullptr || request->done, "rank ", names_(rank_),
                     " (this process): wait() was given a request that was never posted");
    waitOps_.push_back(op);
  }
  try {
    while (!allComplete(waitOps_)) {
      if (deadline.expired())
        throw makeTimeoutError(names_(rank_), waitingOn_);
      if (Clock::now() >= stall::nextCheckAt())
        stall::onStalled(waitingOn_);
      epoll_event events[kMaxEvents];
      lock.unlock();
      int count =
          ::epoll_wait(epollFd_, events, kMaxEvents, stall::wakeBy(deadline).pollTimeoutMs());
      int error = errno;
      lock.lock();
      if (failure_)
        rethrowFailure();  // abort() from another thread
      if (count < 0 && error != EINTR)
        detail::throwSystemError("epoll_wait", error, __FILE__, __LINE__);
      for (int i = 0; i < count; ++i) dispatch(events[i]);
    }
  } catch (...) {
    failLocked(std::current_exception(), /*tellPeers=*/true);  // no-op when already failed
    rethrowFailure();
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i]->done = true;
    if (waitOps_[i] != nullptr)
      ops_.release(waitOps_[i]);
  }
}

void TcpTransport::dispatch(const epoll_event& event) {
  if (event.data.u32 == kWakeId) {
    uint64_t count = 0;
    [[maybe_unused]] auto ignored = ::read(wakeFd_, &count, sizeof(count));
    return;
  }
  Connection& connection = *connections_[event.data.u32];
  if (connection.state() == Connection::State::kClosed)
    return;
  if (event.events & (EPOLLIN | EPOLLHUP | EPOLLERR))
    handle(connection, connection.readSome());
  if (event.events & EPOLLOUT)
    handle(connection, connection.writeSome());
  updateInterest(connection);
}

void TcpTransport::handle(Connection& connection, Connection::Event event) {
  int peer = connection.peer();
  switch (event) {
    case Connection::Event::kNone:
    case Connection::Event::kGoodbye:
      return;
    case Connection::Event::kClosed:
      // Deregister before closing: a forked child may hold a copy of the socket, and then
      // closing alone would leave it in the epoll set.
      ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, connection.fd(), nullptr);
      connection.closeNow();
      return;
    case Connection::Event::kCrashed:
      failLocked(std::make_exception_ptr(makeCrashedPeerError(names_(rank_), names_(peer))),
                 /*tellPeers=*/true);  // a peer that hears this rank's goodbye first learns why
      rethrowFailure();
    case Connection::Event::kAbort: {
      auto prefix = detail::concat("rank ", names_(rank_), " (this process): aborted because rank ",
                                   names_(peer), " reported: ");
      failLocked(detail::decodeError(connection.takeAbortPayload(), prefix, names_(peer)),
                 /*tellPeers=*/true);  // as for a crash: see the top of this file
      rethrowFailure();
    }
  }
}

void TcpTransport::updateInterest(Connection& connection) {
  int peer = connection.peer();
  if (connection.state() == Connection::State::kClosed)
    return;  // out of the epoll set
  bool want = connection.wantsWrite();
  if (want == writeInterest_[peer])
    return;
  epoll_event event{};
  event.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  event.data.u32 = static_cast<uint32_t>(peer);
  CHORUS_SYSCHECK(::epoll_ctl(epollFd_, EPOLL_CTL_MOD, connection.fd(), &event));
  writeInterest_[peer] = want;
}

void TcpTransport::failLocked(std::exception_ptr error, bool tellPeers) noexcept {
  if (failure_)
    return;
  failure_ = error;
  ops_.releaseAll();
  std::vector<uint8_t> notice;
  try {
    if (tellPeers)
      notice = detail::encodeError(error);
  } catch (...) {
    tellPeers = false;  // the peers will see the connection end instead
  }
  for (auto& connection : connections_) {
    if (!connection)
      continue;
    connection->dropRequests();
    if (!tellPeers || connection->state() != Connection::State::kOpen)
      continue;
    try {
      connection->queueControl(FrameKind::kAbort, notice);
      connection->writeSome();  // best effort; close() flushes the rest
    } catch (...) {
    }
  }
  if (wakeFd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] auto ignored = ::write(wakeFd_, &one, sizeof(one));
  }
}

void TcpTransport::abort(std::exception_ptr reason) noexcept {
  if (!reason) {
    reason = std::make_exception_ptr(
        InternalError(detail::concat("rank ", names_(rank_), " (this process): aborted")));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  failLocked(reason, /*tellPeers=*/true);
}

void TcpTransport::close() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_)
    return;
  closed_ = true;
  failLocked(std::make_exception_ptr(
                 Error(detail::concat("rank ", names_(rank_),
                                      " (this process): this transport is closed; create a new "
                                      "communicator to keep communicating"))),
             /*tellPeers=*/false);
  Deadline deadline = Deadline::after(kGoodbyeTimeout);
  for (auto& connection : connections_) {
    if (connection && connection->state() == Connection::State::kOpen) {
      try {
        connection->queueControl(FrameKind::kGoodbye, {});
      } catch (...) {
      }
    }
  }
  for (auto& connection : connections_) {
    if (connection)
      connection->flushAndClose(deadline);
  }
  closeFds();
}

std::exception_ptr TcpTransport::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void TcpTransport::crash() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_)
    return;
  closed_ = true;
  for (auto& connection : connections_) {
    if (connection)
      connection->closeNow();
  }
  failLocked(std::make_exception_ptr(Error(detail::concat(
                 "rank ", names_(rank_), " (this process): this transport crashed (test hook)"))),
             /*tellPeers=*/false);
  closeFds();
}

}  // namespace

std::unique_ptr<Transport> createTcpTransport(const TransportOptions& options) {
  auto sockets = connectMesh(options);
  return std::make_unique<TcpTransport>(options.rank, options.size, options.names,
                                        std::move(sockets));
}

void crashForTesting(Transport& transport) {
  auto* tcp = dynamic_cast<TcpTransport*>(&transport);
  CHORUS_CHECK_ARG(tcp != nullptr, "crashForTesting needs a tcp transport, not ", transport.name());
  tcp->crash();
}

}  // namespace chorus::transport::tcp
