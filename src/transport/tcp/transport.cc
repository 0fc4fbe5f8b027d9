// The TCP transport: a full mesh of authenticated sockets (tcp/bootstrap.cc), each a Connection
// (tcp/connection.cc), driven by one epoll loop inside wait(). No progress thread: the thread that
// waits moves every connection's bytes, so ranks that send to each other never deadlock, and a
// peer that dies is noticed while waiting on anyone.
//
// This file is only how bytes move; posting, the wait loop, the failure latch and abort() are the
// transport core's (transport/core.h), which calls the hooks here.
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

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>

#include "core/check.h"
#include "core/env.h"
#include "core/error_codec.h"
#include "transport/core.h"
#include "transport/tcp/bootstrap.h"
#include "transport/tcp/connection.h"

namespace chorus::transport::tcp {
namespace {

constexpr uint32_t kWakeId = UINT32_MAX;
constexpr int kMaxEvents = 64;
// close() gives the goodbye frames this long to leave.
constexpr std::chrono::milliseconds kGoodbyeTimeout{1000};
// Note [Polling before sleeping]
// A wait first polls: epoll_wait with no timeout, then sched_yield, for 100 us (CHORUS_TCP_POLL_US)
// after it began or after the last pass that found something; only then does it sleep in
// epoll_wait. Sleeping at once made every message that came later pay the kernel's wake-up of a
// sleeping thread, tens of microseconds on a VM: an 8-byte ping-pong over loopback took 51 us a
// round trip where Open MPI's tcp BTL, which polls without end, took 11 us (12 us now). The yield
// gives the core to a peer that shares it (more ranks than cores), as the shm transport's does
// (Note [Spinning] there). With more of the communicator's ranks on this node than it has cores,
// though, polling ranks held the cores that the ranks with something to do needed (4 ranks on 2
// cores: an 8-byte allreduce took 186 us against 128 us sleeping at once), so there a wait sleeps
// at once, as it always did.
constexpr long long kDefaultPollMicroseconds = 100;

// How long a wait polls before it sleeps, for `ranksOnThisNode` ranks here (0: unknown).
std::chrono::microseconds pollTimeFor(int ranksOnThisNode) {
  const long long micros = env::integer("CHORUS_TCP_POLL_US").value_or(kDefaultPollMicroseconds);
  CHORUS_CHECK_ARG(micros >= 0 && micros <= 1000000,
                   "CHORUS_TCP_POLL_US must be a number of microseconds from 0 to 1000000, not ",
                   micros);
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  const bool crowded = cores > 0 && ranksOnThisNode > cores;
  return std::chrono::microseconds(crowded ? 0 : micros);
}

class TcpTransport final : public TransportCore<Op> {
 public:
  TcpTransport(int rank,
               int size,
               detail::RankNames names,
               std::vector<net::Socket> sockets,
               std::chrono::microseconds pollTime);
  ~TcpTransport() override { close(); }

  std::string_view name() const override { return "tcp"; }

 private:
  void startSend(Op& op) override;
  void startRecv(Op& op) override;
  bool peerLeft(int peer) const override;
  bool hasMessageFrom(int peer, uint64_t tag) override {
    return connections_[peer]->hasMessage(tag);
  }
  void beginWait() override { polling_ = false; }
  std::optional<uint64_t> bufferedSendTag(int peer) override {
    return connections_[peer]->bufferedSendTag();
  }
  void idle(Deadline deadline, Clock::time_point now, std::unique_lock<std::mutex>& lock) override;
  void pollEvents() override;
  void onFailure(std::exception_ptr error, bool tellPeers) noexcept override;
  void wakeWaiter() noexcept override;
  void sayGoodbye() noexcept override;
  void vanish() noexcept override;

  void dispatch(const epoll_event& event);
  void handle(Connection& connection, Connection::Event event);
  void updateInterest(Connection& connection);
  void closeFds() noexcept;

  std::vector<std::unique_ptr<Connection>> connections_;  // by rank; null for this rank
  std::vector<bool> writeInterest_;
  int epollFd_ = -1;
  // An eventfd in the epoll set: written to end an epoll_wait early (wakeWaiter, onFailure).
  // Atomic: wakeWaiter() reads it without the lock.
  std::atomic<int> wakeFd_{-1};
  const std::chrono::microseconds pollTime_;  // Note [Polling before sleeping]
  bool polling_ = false;                      // this wait has begun polling
  Clock::time_point pollUntil_;               // then: when it stops polling and sleeps
};

TcpTransport::TcpTransport(int rank,
                           int size,
                           detail::RankNames names,
                           std::vector<net::Socket> sockets,
                           std::chrono::microseconds pollTime)
    : TransportCore(rank, size, std::move(names)),
      connections_(size),
      writeInterest_(size, false),
      pollTime_(pollTime) {
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
      connections_[peer] = std::make_unique<Connection>(peer, worldRank(rank), worldRank(peer),
                                                        std::move(sockets[peer]));
      connections_[peer]->shareAnyPeerReceives(&anyPeerReceives());
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

void TcpTransport::startSend(Op& op) {
  Connection& connection = *connections_[op.peer];
  handle(connection, connection.send(op));
  updateInterest(connection);
}

void TcpTransport::startRecv(Op& op) { connections_[op.peer]->recv(op); }

bool TcpTransport::peerLeft(int peer) const {
  auto state = connections_[peer]->state();
  return state == Connection::State::kSaidGoodbye || state == Connection::State::kClosed;
}

// One epoll_wait with the lock dropped, then the events it brought: a poll (and a yield when it
// found nothing) while the wait polls, else a sleep until something comes (Note [Polling before
// sleeping]).
void TcpTransport::idle(Deadline deadline,
                        Clock::time_point now,
                        std::unique_lock<std::mutex>& lock) {
  if (!polling_) {
    polling_ = true;
    pollUntil_ = now + pollTime_;
  }
  const bool poll = now < pollUntil_;
  epoll_event events[kMaxEvents];
  lock.unlock();
  int count = ::epoll_wait(epollFd_, events, kMaxEvents,
                           poll ? 0 : stall::wakeBy(deadline).pollTimeoutMs());
  int error = errno;
  if (poll && count == 0)
    ::sched_yield();
  lock.lock();
  if (count > 0)
    pollUntil_ = now + pollTime_;
  throwIfFailed();  // abort() from another thread
  if (count < 0 && error != EINTR)
    detail::throwSystemError("epoll_wait", error, __FILE__, __LINE__);
  for (int i = 0; i < count; ++i) dispatch(events[i]);
}

void TcpTransport::pollEvents() {
  epoll_event events[kMaxEvents];
  const int count = ::epoll_wait(epollFd_, events, kMaxEvents, 0);
  if (count < 0 && errno != EINTR)
    detail::throwSystemError("epoll_wait", errno, __FILE__, __LINE__);
  for (int i = 0; i < count; ++i) dispatch(events[i]);
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
      fail(std::make_exception_ptr(makeCrashedPeerError(worldRank(rank()), worldRank(peer))),
           /*tellPeers=*/true);  // a peer that hears this rank's goodbye first learns why
      rethrowFailure();
    case Connection::Event::kAbort:
      fail(decodeAbortNotice(worldRank(rank()), worldRank(peer), connection.takeAbortPayload()),
           /*tellPeers=*/true);  // as for a crash: see the top of this file
      rethrowFailure();
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

void TcpTransport::onFailure(std::exception_ptr error, bool tellPeers) noexcept {
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
      connection->writeSome();  // best effort; sayGoodbye() flushes the rest
    } catch (...) {
    }
  }
  wakeWaiter();
}

void TcpTransport::wakeWaiter() noexcept {
  if (int fd = wakeFd_.load(); fd >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] auto ignored = ::write(fd, &one, sizeof(one));
  }
}

void TcpTransport::sayGoodbye() noexcept {
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

void TcpTransport::vanish() noexcept {
  for (auto& connection : connections_) {
    if (connection)
      connection->closeNow();
  }
  closeFds();
}

}  // namespace

std::unique_ptr<Transport> createTcpTransport(const TransportOptions& options) {
  const std::chrono::microseconds pollTime = pollTimeFor(options.ranksOnThisNode);
  auto sockets = connectMesh(options);
  return std::make_unique<TcpTransport>(options.rank, options.size, options.names,
                                        std::move(sockets), pollTime);
}

void crashForTesting(Transport& transport) {
  auto* tcp = dynamic_cast<TcpTransport*>(&transport);
  CHORUS_CHECK_ARG(tcp != nullptr, "crashForTesting needs a tcp transport, not ", transport.name());
  tcp->crash();
}

}  // namespace chorus::transport::tcp
