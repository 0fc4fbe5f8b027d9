// The chorus job that the security tests run through chorusrun (CHORUS_BACKEND=tcp), in one of
// these modes (argv[1]):
//
//   attacked     The job under attack (attack_running_job.py). The highest rank, the "contact",
//                holds back from the world's TCP mesh so that every other rank sits in its
//                bootstrap window with its transport listener open; it tells the driver the store's
//                and the listeners' addresses over the control socket (SECURITY_CONTROL_SOCKET),
//                makes the genuine connections the driver records as a man in the middle (one
//                transport handshake, one store session), and joins the mesh on "go" (it says
//                "joined" once its first collectives are done: every listener is closed). Then
//                every rank runs collectives checked against closed forms, and bumps a store
//                counter, until the driver says "stop" (and at least kMinIterations times). At the
//                end the store counter must equal size * iterations and the replay canary must
//                still be 1.
//   collectives  A few checked iterations; each rank prints its CHORUS_BIND_ADDR.
//   fail         Rank 1 throws after a few iterations; the others see it fail (PeerError).
//   timeout      Rank 1 stops calling collectives; the others time out (CHORUS_TIMEOUT).
//
// Rank 0 prints "security_job: OK on N ranks after I iterations (T us per iteration)" on success;
// any wrong result or error exits non-zero naming it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "connector/connector.h"
#include "control_channel.h"
#include "core/check.h"
#include "core/net/handshake.h"
#include "store/tcp_store.h"

namespace chorus::security {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMinIterations = 100;
constexpr auto kControlTimeout = std::chrono::seconds(60);
// The world communicator's scope and store keys (src/runtime/dist_context.cc,
// communicator_factory.cc, src/transport/tcp/bootstrap.cc).
const std::string kWorldScope = "world0";
const std::string kTransportPurpose = "tcp-transport/" + kWorldScope;
const std::string kReplayCanary = "security/replay_canary";
const std::string kIterationCounter = "security/iterations";

int wrongResults = 0;

void expect(bool ok, const char* what, int rank, int iteration) {
  if (!ok) {
    ++wrongResults;
    std::fprintf(stderr, "rank %d: %s is wrong at iteration %d\n", rank, what, iteration);
  }
}

// One round of collectives; inputs depend on the iteration so stale data cannot pass.
void checkedIteration(Communicator& comm, int it) {
  const int p = comm.size();
  const int r = comm.rank();
  const int64_t count = 1 + (it * 37) % 4097;
  std::vector<double> sums(count);
  for (int64_t i = 0; i < count; ++i) sums[i] = r + 1 + (i + it) % 5;
  comm.allreduce({Tensor(sums.data(), {count})})->wait();
  bool ok = true;
  for (int64_t i = 0; i < count; ++i) ok = ok && sums[i] == p * (p + 1) / 2.0 + p * ((i + it) % 5);
  expect(ok, "allreduce(sum)", r, it);

  std::vector<int32_t> mine = {r * 1000 + it}, all(p);
  comm.allgather(Tensor(mine.data(), {1}), Tensor(all.data(), {p}))->wait();
  ok = true;
  for (int q = 0; q < p; ++q) ok = ok && all[q] == q * 1000 + it;
  expect(ok, "allgather", r, it);

  const int root = it % p;
  std::vector<int64_t> data(17);
  for (int i = 0; i < 17; ++i) data[i] = r == root ? it + i : -1;
  comm.broadcast(Tensor(data.data(), {17}), root)->wait();
  ok = true;
  for (int i = 0; i < 17; ++i) ok = ok && data[i] == it + i;
  expect(ok, "broadcast", r, it);

  std::vector<int64_t> input(2 * p, r + it), output(2);
  comm.reduceScatter(Tensor(input.data(), {2 * p}), Tensor(output.data(), {2}))->wait();
  expect(output == std::vector<int64_t>(2, p * (p - 1) / 2 + int64_t(p) * it), "reduce_scatter", r,
         it);

  std::vector<float> maxima(3, float(r * it));
  comm.allreduce({Tensor(maxima.data(), {3})}, ReduceOp::kMax)->wait();
  expect(maxima == std::vector<float>(3, float((p - 1) * it)), "allreduce(max)", r, it);
}

// The contact rank's part before it joins the mesh (see the file comment).
class Contact {
 public:
  Contact(connector::Connector& connector, const std::string& controlPath)
      : connector_(connector), control_(controlPath) {}

  void holdBackUntilGo() {
    store::Store& store = *connector_.store();
    const int self = connector_.rank();
    Deadline deadline = Deadline::after(kControlTimeout);
    // Publish this rank's node id as its own world creation will (same key, same value), so the
    // lower ranks get past the node-id exchange and open their transport listeners.
    store.set("comm/" + kWorldScope + "/nodes/node/" + std::to_string(self),
              store::toBytes(connector_.nodeId()));
    control_.send(std::string("store ") + std::getenv("CHORUS_STORE"));
    for (int peer = 0; peer < self; ++peer) {
      std::string key = "comm/" + kWorldScope + "/backend/addr/" + std::to_string(peer);
      control_.send("listener " + std::to_string(peer) + " " +
                    store::toString(store.get(key, deadline)));
    }
    control_.send("ready");
    while (true) {
      std::istringstream command(control_.receive(deadline));
      std::string verb, address;
      command >> verb >> address;
      if (verb == "go") {
        return;
      }
      if (verb == "record-transport") {
        recordTransportHandshake(net::Address::parse(address), deadline);
      } else if (verb == "record-store") {
        recordStoreSession(net::Address::parse(address), deadline);
      } else {
        throw InvalidArgumentError("unknown command from the attack driver: " + verb);
      }
    }
  }

  // Every rank has finished its bootstrap once a collective completed: the listeners are closed.
  void reportJoined() { control_.send("joined"); }

  // The replay canary must have been added to exactly once: by the recorded genuine session (and
  // not at all when there was none).
  void checkReplayCanary(int iterations) {
    int64_t expected = recordedStore_ ? 1 : 0;
    expect(connector_.store()->add(kReplayCanary, 0) == expected, "the replay canary",
           connector_.rank(), iterations);
  }

  // Whether the driver has said "stop" (now or before).
  bool stopRequested() {
    while (!stopped_) {
      std::optional<std::string> line = control_.poll();
      if (!line) {
        break;
      }
      stopped_ = *line == "stop";
    }
    return stopped_;
  }

 private:
  // A genuine transport handshake as rank 0 (so the listener drops the connection after it
  // passes), for the driver to record and replay.
  void recordTransportHandshake(const net::Address& address, Deadline deadline) {
    net::Socket socket = net::connectTcp(address, deadline);
    uint64_t server =
        net::clientHandshake(socket.fd(), connector_.token(), kTransportPurpose, 0, deadline);
    control_.send("recorded-transport " + std::to_string(server));
  }

  // A genuine store session that adds 1 to the replay canary, for the driver to record and replay.
  void recordStoreSession(const net::Address& address, Deadline deadline) {
    store::TcpStore session(address, connector_.token(), deadline);
    int64_t value = session.add(kReplayCanary, 1);
    recordedStore_ = true;
    control_.send("recorded-store " + std::to_string(value));
  }

  connector::Connector& connector_;
  ControlChannel control_;
  bool stopped_ = false;
  bool recordedStore_ = false;
};

// The number of wrong results on all ranks together.
int32_t wrongResultsEverywhere(Communicator& comm) {
  int32_t total = wrongResults;
  comm.allreduce(Tensor(&total, {1}))->wait();
  return total;
}

int runAttacked() {
  auto timeout = std::chrono::seconds(120);
  auto connector = connector::connectFromEnvironment(timeout);
  const int rank = connector->rank();
  const int size = connector->size();
  std::optional<Contact> contact;
  if (rank == size - 1) {
    const char* path = std::getenv("SECURITY_CONTROL_SOCKET");
    CHORUS_CHECK_ARG(path != nullptr, "SECURITY_CONTROL_SOCKET is not set");
    contact.emplace(*connector, path);
    contact->holdBackUntilGo();
  }
  auto comm = DistContext::get().communicator();
  auto start = Clock::now();
  int iterations = 0;
  for (bool keepGoing = true; keepGoing; ++iterations) {
    checkedIteration(*comm, iterations);
    if (contact && iterations == 0) {
      contact->reportJoined();
    }
    connector->store()->add(kIterationCounter, 1);
    int32_t flag = 1;
    if (contact) {
      flag = (contact->stopRequested() && iterations + 1 >= kMinIterations) ? 0 : 1;
    }
    comm->broadcast(Tensor(&flag, {1}), size - 1)->wait();
    keepGoing = flag == 1;
  }
  double microseconds =
      std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iterations;
  comm->barrier()->wait();
  int64_t counted = connector->store()->add(kIterationCounter, 0);
  expect(counted == int64_t(size) * iterations, "the store's iteration counter", rank, iterations);
  if (contact) {
    contact->checkReplayCanary(iterations);
  }
  if (wrongResultsEverywhere(*comm) == 0 && rank == 0) {
    std::printf("security_job: OK on %d ranks after %d iterations (%.1f us per iteration)\n", size,
                iterations, microseconds);
  }
  return wrongResults == 0 ? 0 : 1;
}

int runSimple(const std::string& mode) {
  auto comm = DistContext::get().communicator();
  const char* bind = std::getenv("CHORUS_BIND_ADDR");
  std::printf("bind=%s\n", bind ? bind : "(unset)");
  const int iterations = 5;
  for (int it = 0; it < iterations; ++it) {
    if (comm->rank() == 1 && it == 3) {
      if (mode == "fail") {
        throw InvalidArgumentError("rank 1 fails on purpose (security log test)");
      }
      if (mode == "timeout") {
        pause();  // stops calling collectives; chorusrun kills it once the others time out
      }
    }
    checkedIteration(*comm, it);
  }
  if (wrongResultsEverywhere(*comm) == 0 && comm->rank() == 0) {
    std::printf("security_job: OK on %d ranks after %d iterations\n", comm->size(), iterations);
  }
  return wrongResults == 0 ? 0 : 1;
}

}  // namespace
}  // namespace chorus::security

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "attacked") {
      return chorus::security::runAttacked();
    }
    if (mode == "collectives" || mode == "fail" || mode == "timeout") {
      return chorus::security::runSimple(mode);
    }
    std::fprintf(stderr, "usage: security_job attacked|collectives|fail|timeout\n");
    return 2;
  } catch (const std::exception& e) {
    const char* rank = std::getenv("CHORUS_RANK");
    std::fprintf(stderr, "rank %s: %s\n", rank ? rank : "?", e.what());
    return 1;
  }
}
