// TCP-specific behaviour: the registry, bootstrap authentication, and malformed input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/net/socket.h"
#include "harness/fork_first.h"
#include "store/hash_store.h"
#include "store/tcp_store.h"
#include "transport/registry.h"
#include "transport/tcp/transport.h"
#include "transport_group.h"

namespace chorus::transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TransportOptions optionsFor(int rank,
                            int size,
                            std::shared_ptr<store::Store> store,
                            const std::string& token,
                            const std::string& scope) {
  TransportOptions options;
  options.rank = rank;
  options.size = size;
  options.store = std::move(store);
  options.token = token;
  options.scope = scope;
  options.bindHost = "127.0.0.1";
  options.deadline = Deadline::after(milliseconds(1500));
  return options;
}

TEST(Registry, UnknownNameListsKnownOnes) {
  TransportOptions options;
  try {
    createTransport("carrier-pigeon", options);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("carrier-pigeon"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("tcp"), std::string::npos);
  }
}

TEST(Registry, TcpByNameWithOneRank) {
  TransportOptions options;
  auto transport = createTransport("tcp", options);
  EXPECT_EQ(transport->name(), "tcp");
  EXPECT_EQ(transport->size(), 1);
  Request* none[] = {};
  transport->wait(std::span<Request* const>(none, 0), Deadline::after(seconds(1)));
}

// Two ranks that disagree on the token (or the scope) must fail within the deadline, not hang
// and not connect.
void expectBootstrapFails(const std::string& token1, const std::string& scope1) {
  auto store = std::make_shared<store::HashStore>();
  std::exception_ptr errors[2];
  auto start = Clock::now();
  std::thread other([&] {
    try {
      tcp::createTcpTransport(optionsFor(1, 2, store, token1, scope1));
    } catch (...) {
      errors[1] = std::current_exception();
    }
  });
  try {
    tcp::createTcpTransport(optionsFor(0, 2, store, "good-token", "scope"));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  other.join();
  EXPECT_LT(Clock::now() - start, seconds(5));
  ASSERT_TRUE(errors[0] && errors[1]);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const TimeoutError& error) {  // rank 0 waited for an authentic rank 1
    EXPECT_EQ(error.missingRanks(), std::vector<int>{1});
  }
  try {
    std::rethrow_exception(errors[1]);
  } catch (const PeerError& error) {  // rank 1 could not authenticate rank 0
    EXPECT_EQ(error.peerRank(), 0);
    EXPECT_NE(std::string(error.what()).find("rank 1 (this process)"), std::string::npos);
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.missingRanks(), std::vector<int>{0});
  }
}

TEST(TcpBootstrap, WrongTokenFailsInsteadOfConnecting) {
  expectBootstrapFails("bad-token", "scope");
}

TEST(TcpBootstrap, WrongScopeFailsInsteadOfConnecting) {
  expectBootstrapFails("good-token", "other-scope");
}

TEST(TcpBootstrap, MissingRankTimesOutNamingIt) {
  auto store = std::make_shared<store::HashStore>();
  try {
    tcp::createTcpTransport(optionsFor(1, 3, store, "t", "s"));
    FAIL() << "no error";
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.missingRanks(), std::vector<int>{0});
  }
}

// A stranger that connects and sends garbage is dropped; the real ranks still connect.
TEST(TcpBootstrap, StrangersAreDropped) {
  auto store = std::make_shared<store::HashStore>();
  std::unique_ptr<Transport> transports[2];
  std::thread rank0(
      [&] { transports[0] = tcp::createTcpTransport(optionsFor(0, 2, store, "t", "s")); });
  auto address =
      net::Address::parse(store::toString(store->get("addr/0", Deadline::after(seconds(2)))));
  {
    net::Socket stranger = net::connectTcp(address, Deadline::after(seconds(2)));
    const char garbage[40] = "GET / HTTP/1.1\r\n\r\n";
    net::sendAll(stranger.fd(), garbage, sizeof(garbage), Deadline::after(seconds(2)));
  }
  transports[1] = tcp::createTcpTransport(optionsFor(1, 2, store, "t", "s"));
  rank0.join();
  ASSERT_TRUE(transports[0] && transports[1]);
  int out = 42, in = 0;
  Request send, recv;
  Fingerprint fingerprint;
  transports[1]->postSend(0, 0, fingerprint, &out, 4, send);
  transports[0]->postRecv(1, 0, fingerprint, &in, 4, recv);
  Request* sends[] = {&send};
  Request* recvs[] = {&recv};
  transports[1]->wait(sends, Deadline::after(seconds(2)));
  transports[0]->wait(recvs, Deadline::after(seconds(2)));
  EXPECT_EQ(in, 42);
}

// Rank 2 is a real process, killed with SIGKILL while ranks 0 and 1 (threads here) wait on each
// other: both must fail with PeerError naming rank 2 within about a second.
// A wait polls for a moment first (Note [Polling before sleeping]), then sleeps in epoll_wait.
TEST(TcpTransport, IdleWaitDoesNotBurnACore) {
  const auto used = testing::cpuTimeOfAnIdleWait("tcp");
  // Polling throughout would use ~500 ms; polling 100 us and then sleeping uses a few ms.
  EXPECT_LT(used, std::chrono::microseconds(100000)) << used.count() << " us of CPU";
}

TEST(TcpFailure, KilledProcessIsNoticedByEveryRank) {
  const std::string token = "kill-test-token";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // Forked before the store's threads start (harness/fork_first.h).
  chorus::testing::ForkFirst forked(token, seconds(30));
  pid_t child = forked.fork([&](const net::Address& address) {
    ::alarm(30);  // never outlive a broken test
    auto store = std::make_shared<store::TcpStore>(address, token, Deadline::after(seconds(10)));
    auto transport = tcp::createTcpTransport(optionsFor(2, 3, store, token, "kill"));
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1)
      return 2;
    while (true) ::pause();
  });
  const net::Address address = forked.start();
  ::close(ready[1]);
  std::unique_ptr<Transport> transports[2];
  std::exception_ptr errors[2];
  std::thread threads[2];
  for (int rank = 0; rank < 2; ++rank) {
    threads[rank] = std::thread([&, rank] {
      try {
        auto store =
            std::make_shared<store::TcpStore>(address, token, Deadline::after(seconds(10)));
        auto options = optionsFor(rank, 3, store, token, "kill");
        options.deadline = Deadline::after(seconds(10));
        transports[rank] = tcp::createTcpTransport(options);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  char byte = 0;
  bool childReady = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  if (!childReady || errors[0] || errors[1]) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    FAIL() << "the group did not form";
  }
  auto start = Clock::now();
  for (int rank = 0; rank < 2; ++rank) {
    threads[rank] = std::thread([&, rank] {
      int value = 0;
      Request request;
      Request* requests[] = {&request};
      try {
        transports[rank]->postRecv(1 - rank, 0, Fingerprint{}, &value, 4, request);
        transports[rank]->wait(requests, Deadline::after(seconds(10)));
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(100));  // let both start waiting (not needed to pass)
  ::kill(child, SIGKILL);
  for (auto& thread : threads) thread.join();
  ::waitpid(child, nullptr, 0);
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(errors[rank]) << "rank " << rank << " did not fail";
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const PeerError& error) {
      EXPECT_EQ(error.peerRank(), 2) << error.what();
      EXPECT_NE(std::string(error.what()).find("rank 2 closed its connection unexpectedly"),
                std::string::npos)
          << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "wrong error type: " << error.what();
    }
  }
}

}  // namespace
}  // namespace chorus::transport
