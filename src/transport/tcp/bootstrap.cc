// Full-mesh connection setup for the TCP transport. See bootstrap.h.
//
// Order: rank i first connects to ranks 0..i-1 (lowest first), then accepts from ranks i+1..size-1.
// This never deadlocks: rank i's connect phase only needs lower ranks to reach their accept phase,
// and rank 0 has no connect phase. Cost: size-1 handshakes per rank (two round trips each); fine
// for the tens to hundreds of ranks a TCP mesh is meant for.
//
// Note [Concurrent bootstrap handshakes]
// The listener is reachable by anyone who can route to it while the mesh connects. Each accepted
// connection's handshake therefore runs on its own thread: a client that connects and says nothing
// (a port scanner, a stalled or hostile process) holds up only itself, for at most
// kHandshakeTimeout, and never the ranks queued behind it. At most kMaxHandshakes run at once;
// further connections wait in the listen backlog until one finishes. Once the mesh is connected,
// the handshakes still running are cut off (shutdown(2)) and the listener is closed: no listener
// outlives the bootstrap.
#include "transport/tcp/bootstrap.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/net/handshake.h"

namespace chorus::transport::tcp {
namespace {

// How long one accepted client has to complete its handshake.
constexpr std::chrono::seconds kHandshakeTimeout{10};
// Handshakes in flight at once (see Note [Concurrent bootstrap handshakes]).
constexpr size_t kMaxHandshakes = 128;

std::string addressKey(int rank) { return detail::concat("addr/", rank); }

std::string purposeOf(const TransportOptions& options) { return "tcp-transport/" + options.scope; }

// The host peers should dial: the bind address, or this host's name when bound to every interface.
std::string advertisedHost(const std::string& bindHost) {
  if (!bindHost.empty() && bindHost != "0.0.0.0" && bindHost != "::")
    return bindHost;
  char name[256] = {};
  CHORUS_SYSCHECK(::gethostname(name, sizeof(name) - 1));
  return name;
}

// The world ranks of the members in [from, to) not connected yet: "3, 5".
std::string rankList(const std::vector<net::Socket>& sockets,
                     const TransportOptions& options,
                     int from,
                     int to) {
  std::string names;
  for (int rank = from; rank < to; ++rank) {
    if (rank != options.rank && !sockets[rank].valid()) {
      names += detail::concat(names.empty() ? "" : ", ", options.names(rank));
    }
  }
  return names;
}

std::vector<int> missingRanks(const std::vector<net::Socket>& sockets,
                              const TransportOptions& options) {
  std::vector<int> missing;
  for (int rank = 0; rank < static_cast<int>(sockets.size()); ++rank) {
    if (rank != options.rank && !sockets[rank].valid())
      missing.push_back(options.names(rank));
  }
  return missing;
}

net::Socket connectTo(const TransportOptions& options, int peer) {
  const int self = options.names(options.rank);
  const int peerName = options.names(peer);
  std::string text;
  try {
    text = store::toString(options.store->get(addressKey(peer), options.deadline));
  } catch (const TimeoutError& error) {
    throw TimeoutError(detail::concat("rank ", self, " (this process): timed out waiting for rank ",
                                      peerName, " to publish its transport address (", error.what(),
                                      "); did every rank start?"),
                       {peerName});
  }
  auto address = net::Address::parse(text);
  net::Socket socket;
  try {
    socket = net::connectTcp(address, options.deadline);
    Deadline handshakeDeadline =
        Deadline::earliest(options.deadline, Deadline::after(kHandshakeTimeout));
    uint64_t serverId =
        net::clientHandshake(socket.fd(), options.token, purposeOf(options),
                             static_cast<uint64_t>(options.rank), handshakeDeadline);
    if (serverId != static_cast<uint64_t>(peer)) {
      throw Error(detail::concat("the server there says it is rank ",
                                 options.names(static_cast<int>(serverId))));
    }
  } catch (const TimeoutError& error) {
    throw TimeoutError(
        detail::concat("rank ", self, " (this process): timed out connecting to rank ", peerName,
                       " at ", text, ": ", error.what()),
        {peerName});
  } catch (const Error& error) {
    throw PeerError(detail::concat("rank ", self, " (this process): could not connect to rank ",
                                   peerName, " at ", text, ": ", error.what(),
                                   ". Do all ranks share the job token and communicator?"),
                    peerName);
  }
  return socket;
}

// The server side of the handshakes of accepted connections, each on its own thread (see Note
// [Concurrent bootstrap handshakes]). Only the accepting thread calls the methods.
class Handshakes {
 public:
  explicit Handshakes(const TransportOptions& options) : options_(options) {
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHORUS_SYSCHECK(wake_);
  }

  // Cuts off the handshakes still running (their reads fail at once) and joins every thread.
  ~Handshakes() {
    {
      std::lock_guard lock(mutex_);
      for (auto& task : tasks_) {
        if (!task->done)
          ::shutdown(task->socket.fd(), SHUT_RDWR);
      }
    }
    for (auto& task : tasks_) {
      if (task->thread.joinable())
        task->thread.join();
    }
    ::close(wake_);
  }

  Handshakes(const Handshakes&) = delete;
  Handshakes& operator=(const Handshakes&) = delete;

  bool full() const { return tasks_.size() >= kMaxHandshakes; }
  // Readable when a handshake has finished.
  int wakeFd() const { return wake_; }

  void start(net::Socket socket) {
    auto task = std::make_unique<Task>();
    task->socket = std::move(socket);
    Task& started = *task;
    tasks_.push_back(std::move(task));
    try {
      started.thread = std::thread([this, &started] { run(started); });
    } catch (const std::system_error&) {
      tasks_
          .pop_back();  // no thread to spare: the connection is dropped, as an impostor's would be
    }
  }

  // The finished handshakes that passed, as (client id, socket); failed ones are closed.
  std::vector<std::pair<uint64_t, net::Socket>> takePassed() {
    uint64_t count = 0;
    [[maybe_unused]] ssize_t got = ::read(wake_, &count, sizeof(count));
    std::vector<std::pair<uint64_t, net::Socket>> passed;
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      Task& task = **it;
      std::optional<uint64_t> id;
      {
        std::lock_guard lock(mutex_);
        if (!task.done) {
          ++it;
          continue;
        }
        id = task.id;
      }
      task.thread.join();
      if (id)
        passed.emplace_back(*id, std::move(task.socket));
      it = tasks_.erase(it);
    }
    return passed;
  }

 private:
  struct Task {
    net::Socket socket;
    std::thread thread;
    bool done = false;           // guarded by mutex_
    std::optional<uint64_t> id;  // guarded by mutex_; set when the handshake passed
  };

  void run(Task& task) noexcept {
    std::optional<uint64_t> id;
    try {
      Deadline deadline = Deadline::earliest(options_.deadline, Deadline::after(kHandshakeTimeout));
      id = net::serverHandshake(task.socket.fd(), options_.token, purposeOf(options_),
                                static_cast<uint64_t>(options_.rank), deadline);
    } catch (const std::exception&) {
      // An impostor, a scanner or a stale client: dropped; the real ranks are still awaited.
    }
    {
      std::lock_guard lock(mutex_);
      task.id = id;
      task.done = true;
    }
    uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(wake_, &one, sizeof(one));
  }

  const TransportOptions& options_;
  int wake_ = -1;
  std::mutex mutex_;
  std::list<std::unique_ptr<Task>> tasks_;
};

// Accepts from ranks above this one until all are connected or the deadline passes.
void acceptHigher(const TransportOptions& options,
                  const net::Socket& listener,
                  std::vector<net::Socket>& sockets) {
  const int self = options.rank;
  int waiting = options.size - 1 - self;
  Handshakes handshakes(options);
  while (waiting > 0) {
    pollfd entries[2] = {{listener.fd(), static_cast<short>(handshakes.full() ? 0 : POLLIN), 0},
                         {handshakes.wakeFd(), POLLIN, 0}};
    int ready = ::poll(entries, 2, options.deadline.pollTimeoutMs());
    if (ready < 0 && errno == EINTR)
      continue;
    CHORUS_SYSCHECK(ready);
    if (ready == 0) {
      throw TimeoutError(
          detail::concat("rank ", options.names(self),
                         " (this process): timed out waiting for rank(s) ",
                         rankList(sockets, options, self + 1, options.size),
                         " to connect to this rank's transport; did they start, with the same job "
                         "token and store?"),
          missingRanks(sockets, options));
    }
    if (entries[1].revents & POLLIN) {
      for (auto& [id, socket] : handshakes.takePassed()) {
        if (id <= static_cast<uint64_t>(self) || id >= static_cast<uint64_t>(options.size) ||
            sockets[id].valid()) {
          continue;  // authenticated but not a rank we expect (duplicate or confused): dropped
        }
        sockets[id] = std::move(socket);
        --waiting;
      }
    }
    if (entries[0].revents & POLLIN) {
      net::Socket socket = net::acceptTcp(listener, Deadline::after(std::chrono::milliseconds(0)));
      if (socket.valid())
        handshakes.start(std::move(socket));
    }
  }
}

}  // namespace

std::vector<net::Socket> connectMesh(const TransportOptions& options) {
  CHORUS_CHECK_ARG(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "rank ",
                   options.rank, " is not a rank of a group of ", options.size);
  std::vector<net::Socket> sockets(options.size);
  if (options.size == 1)
    return sockets;
  CHORUS_CHECK_ARG(options.store != nullptr, "rank ", options.names(options.rank),
                   " (this process): the TCP transport needs a store to exchange addresses");
  net::Socket listener = net::listenTcp(options.bindHost, 0);
  std::string address =
      net::Address{advertisedHost(options.bindHost), net::boundPort(listener)}.toString();
  options.store->set(addressKey(options.rank), store::toBytes(address));
  for (int peer = 0; peer < options.rank; ++peer) sockets[peer] = connectTo(options, peer);
  acceptHigher(options, listener, sockets);
  return sockets;
}

}  // namespace chorus::transport::tcp
