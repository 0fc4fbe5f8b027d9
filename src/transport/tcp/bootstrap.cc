// Full-mesh connection setup for the TCP transport. See bootstrap.h.
//
// Order: rank i first connects to ranks 0..i-1 (lowest first), then accepts from ranks i+1..size-1.
// This never deadlocks: rank i's connect phase only needs lower ranks to reach their accept phase,
// and rank 0 has no connect phase. Cost: size-1 handshakes per rank (two round trips each), done
// one at a time; fine for the tens to hundreds of ranks a TCP mesh is meant for.
#include "transport/tcp/bootstrap.h"

#include <unistd.h>

#include <chrono>
#include <string>

#include "core/check.h"
#include "core/net/handshake.h"

namespace chorus::transport::tcp {
namespace {

// One slow or silent client may not hold up the accept loop for longer than this.
constexpr std::chrono::seconds kHandshakeTimeout{10};

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

std::string rankList(const std::vector<net::Socket>& sockets, int self, int from, int to) {
  std::string names;
  for (int rank = from; rank < to; ++rank) {
    if (rank != self && !sockets[rank].valid()) {
      names += detail::concat(names.empty() ? "" : ", ", rank);
    }
  }
  return names;
}

std::vector<int> missingRanks(const std::vector<net::Socket>& sockets, int self) {
  std::vector<int> missing;
  for (int rank = 0; rank < static_cast<int>(sockets.size()); ++rank) {
    if (rank != self && !sockets[rank].valid())
      missing.push_back(rank);
  }
  return missing;
}

net::Socket connectTo(const TransportOptions& options, int peer) {
  const int self = options.rank;
  std::string text;
  try {
    text = store::toString(options.store->get(addressKey(peer), options.deadline));
  } catch (const TimeoutError& error) {
    throw TimeoutError(detail::concat("rank ", self, " (this process): timed out waiting for rank ",
                                      peer, " to publish its transport address (", error.what(),
                                      "); did every rank start?"),
                       {peer});
  }
  auto address = net::Address::parse(text);
  net::Socket socket;
  try {
    socket = net::connectTcp(address, options.deadline);
    Deadline handshakeDeadline =
        Deadline::earliest(options.deadline, Deadline::after(kHandshakeTimeout));
    uint64_t serverId = net::clientHandshake(socket.fd(), options.token, purposeOf(options),
                                             static_cast<uint64_t>(self), handshakeDeadline);
    if (serverId != static_cast<uint64_t>(peer)) {
      throw Error(detail::concat("the server there says it is rank ", serverId));
    }
  } catch (const TimeoutError& error) {
    throw TimeoutError(
        detail::concat("rank ", self, " (this process): timed out connecting to rank ", peer,
                       " at ", text, ": ", error.what()),
        {peer});
  } catch (const Error& error) {
    throw PeerError(detail::concat("rank ", self, " (this process): could not connect to rank ",
                                   peer, " at ", text, ": ", error.what(),
                                   ". Do all ranks share the job token and communicator?"),
                    peer);
  }
  return socket;
}

// Accepts from ranks above this one until all are connected or the deadline passes.
void acceptHigher(const TransportOptions& options,
                  const net::Socket& listener,
                  std::vector<net::Socket>& sockets) {
  const int self = options.rank;
  int waiting = options.size - 1 - self;
  while (waiting > 0) {
    net::Socket socket = net::acceptTcp(listener, options.deadline);
    if (!socket.valid()) {
      throw TimeoutError(
          detail::concat("rank ", self, " (this process): timed out waiting for rank(s) ",
                         rankList(sockets, self, self + 1, options.size),
                         " to connect to this rank's transport; did they start, with the same job "
                         "token and store?"),
          missingRanks(sockets, self));
    }
    uint64_t id = 0;
    try {
      Deadline handshakeDeadline =
          Deadline::earliest(options.deadline, Deadline::after(kHandshakeTimeout));
      id = net::serverHandshake(socket.fd(), options.token, purposeOf(options),
                                static_cast<uint64_t>(self), handshakeDeadline);
    } catch (const Error&) {
      continue;  // an impostor or a stale client: drop it, keep waiting for the real ranks
    }
    if (id <= static_cast<uint64_t>(self) || id >= static_cast<uint64_t>(options.size) ||
        sockets[id].valid()) {
      continue;  // authenticated but not a rank we expect (duplicate or confused): drop it
    }
    sockets[id] = std::move(socket);
    --waiting;
  }
}

}  // namespace

std::vector<net::Socket> connectMesh(const TransportOptions& options) {
  CHORUS_CHECK_ARG(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "rank ",
                   options.rank, " is not a rank of a group of ", options.size);
  std::vector<net::Socket> sockets(options.size);
  if (options.size == 1)
    return sockets;
  CHORUS_CHECK_ARG(options.store != nullptr, "rank ", options.rank,
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
