// TcpStore and TcpStoreServer specifics: authentication, hostile clients, server loss, limits.
#include "store/tcp_store.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <future>
#include <vector>

#include "chorus/error.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace chorus::store {
namespace {

using namespace std::chrono_literals;

class TcpStoreTest : public ::testing::Test {
 protected:
  net::Address address() const { return {"127.0.0.1", server_->port()}; }
  std::unique_ptr<TcpStore> connect(const std::string& token) {
    return std::make_unique<TcpStore>(address(), token, Deadline::after(10s));
  }
  net::Socket rawConnect() { return net::connectTcp(address(), Deadline::after(10s)); }

  // Half-closes `socket` and waits until the server closes its side. The server counts a refused
  // connection before it closes, so afterwards refusedConnections() includes this one.
  static void expectServerCloses(net::Socket& socket) {
    ::shutdown(socket.fd(), SHUT_WR);
    Deadline deadline = Deadline::after(10s);
    uint8_t byte;
    try {
      while (true) net::recvAll(socket.fd(), &byte, 1, deadline);  // drain whatever it sent
    } catch (const PeerError&) {
      return;
    } catch (const TimeoutError&) {
      ADD_FAILURE() << "the server did not close a bad connection";
    }
  }

  // The server still serves a fresh client and an existing one.
  void expectServing(TcpStore& existing) {
    EXPECT_EQ(existing.add("alive", 1), ++alive_);
    auto fresh = connect(token_);
    EXPECT_EQ(toString(fresh->get("hello", Deadline::after(5s))), "world");
  }

  std::string token_ = net::generateToken();
  std::unique_ptr<TcpStoreServer> server_ =
      std::make_unique<TcpStoreServer>("127.0.0.1", 0, token_);
  int64_t alive_ = 0;
};

TEST_F(TcpStoreTest, ConnectsAndReportsTheLocalAddress) {
  auto store = connect(token_);
  store->set("hello", toBytes("world"));
  EXPECT_EQ(store->localAddress(), "127.0.0.1");
  EXPECT_EQ(server_->acceptedConnections(), 1u);
  EXPECT_EQ(server_->refusedConnections(), 0u);
}

TEST_F(TcpStoreTest, WrongTokenIsRefusedOnBothSides) {
  std::string wrong = net::generateToken();
  EXPECT_THROW(connect(wrong), Error);

  // The same through a raw socket, so the test can wait for the server's verdict.
  net::Socket socket = rawConnect();
  EXPECT_THROW(net::clientHandshake(socket.fd(), wrong, "store", 0, Deadline::after(5s)), Error);
  expectServerCloses(socket);
  EXPECT_GE(server_->refusedConnections(), 1u);
  EXPECT_EQ(server_->acceptedConnections(), 0u);
}

TEST_F(TcpStoreTest, ServerSurvivesHostileClients) {
  auto good = connect(token_);
  good->set("hello", toBytes("world"));
  uint64_t refused = 0;

  {  // wrong token
    net::Socket socket = rawConnect();
    EXPECT_THROW(
        net::clientHandshake(socket.fd(), net::generateToken(), "store", 0, Deadline::after(5s)),
        Error);
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  {  // garbage instead of a handshake
    net::Socket socket = rawConnect();
    std::array<uint8_t, 64> garbage;
    garbage.fill(0xAB);
    net::sendAll(socket.fd(), garbage.data(), garbage.size(), Deadline::after(5s));
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  {  // an oversized length prefix before authenticating
    net::Socket socket = rawConnect();
    std::array<uint8_t, 44> frame;
    frame.fill(0xFF);
    net::sendAll(socket.fd(), frame.data(), frame.size(), Deadline::after(5s));
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  {  // a port scanner: connect and hang up
    net::Socket socket = rawConnect();
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  {  // authenticated, then an oversized length prefix
    net::Socket socket = rawConnect();
    net::clientHandshake(socket.fd(), token_, "store", 0, Deadline::after(5s));
    uint32_t huge = 0xFFFFFFFF;
    net::sendAll(socket.fd(), &huge, sizeof(huge), Deadline::after(5s));
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  {  // authenticated, then a garbage frame: unknown request type
    net::Socket socket = rawConnect();
    net::clientHandshake(socket.fd(), token_, "store", 0, Deadline::after(5s));
    std::array<uint8_t, 7> frame = {3, 0, 0, 0, 0x77, 0x01, 0x02};
    net::sendAll(socket.fd(), frame.data(), frame.size(), Deadline::after(5s));
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  {  // authenticated, then a SET whose key length overruns the frame
    net::Socket socket = rawConnect();
    net::clientHandshake(socket.fd(), token_, "store", 0, Deadline::after(5s));
    std::array<uint8_t, 9> frame = {5, 0, 0, 0, /*kSet*/ 1, 0xFF, 0xFF, 0, 0};
    net::sendAll(socket.fd(), frame.data(), frame.size(), Deadline::after(5s));
    expectServerCloses(socket);
    EXPECT_EQ(server_->refusedConnections(), ++refused);
    expectServing(*good);
  }
  // Connections that hang up at once (with or without a reset) do not disturb the server.
  for (int i = 0; i < 20; ++i) {
    net::Socket socket = rawConnect();
    if (i % 2 == 0) {
      linger reset{1, 0};
      ::setsockopt(socket.fd(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    }
  }
  expectServing(*good);
  EXPECT_GE(server_->refusedConnections(), refused);
}

TEST_F(TcpStoreTest, StalledHandshakeDoesNotBlockOtherClients) {
  auto good = connect(token_);
  good->set("hello", toBytes("world"));
  net::Socket stalled = rawConnect();
  std::array<uint8_t, 10> partial = {'C', 'H', 'O', 'R', 'U', 'S', 'H', '1', 0, 0};
  net::sendAll(stalled.fd(), partial.data(), partial.size(), Deadline::after(5s));
  // The stalled client holds its connection mid-handshake; everyone else carries on.
  auto start = Clock::now();
  for (int i = 0; i < 3; ++i) expectServing(*good);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(server_->refusedConnections(), 0u);
  expectServerCloses(stalled);
  EXPECT_EQ(server_->refusedConnections(), 1u);
}

// Regression: the connection cap once counted connections still in the handshake, so anyone who
// could reach the port filled it with idle connections and no rank could connect. See
// Note [Store connection limits] (tcp_store.h).
TEST_F(TcpStoreTest, UnauthenticatedConnectionsCannotStarveRanks) {
  constexpr size_t kCap = 8;  // both caps; the old single cap would be full after kCap scanners
  server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, token_,
                                             TcpStoreServerLimits{kCap, kCap / 2});
  auto early = connect(token_);
  early->set("hello", toBytes("world"));

  // Twice the cap of scanners that stay: half connect and say nothing, half stall mid-handshake.
  std::vector<net::Socket> scanners;
  for (size_t i = 0; i < 2 * kCap; ++i) {
    scanners.push_back(rawConnect());
    if (i % 2 == 1) {
      std::array<uint8_t, 10> partial = {'C', 'H', 'O', 'R', 'U', 'S', 'H', '1', 0, 0};
      net::sendAll(scanners.back().fd(), partial.data(), partial.size(), Deadline::after(5s));
    }
  }
  // A rank connecting after them gets in and is served, and so is the one from before.
  auto late = connect(token_);
  EXPECT_EQ(toString(late->get("hello", Deadline::after(5s))), "world");
  late->set("late", toBytes("in"));
  EXPECT_EQ(toString(early->get("late", Deadline::after(5s))), "in");
  EXPECT_EQ(server_->acceptedConnections(), 2u);

  // Every scanner but the newest kCap / 2 - 1 was evicted (the rank took the last place while in
  // the handshake), oldest first; the server closed them without being prompted.
  size_t evictedScanners = 2 * kCap - (kCap / 2 - 1);
  for (size_t i = 0; i < evictedScanners; ++i) {
    uint8_t byte;
    EXPECT_THROW(net::recvAll(scanners[i].fd(), &byte, 1, Deadline::after(5s)), PeerError)
        << "scanner " << i << " was not evicted";
  }
  EXPECT_EQ(server_->evictedConnections(), evictedScanners);

  // Authenticated connections have their own cap: a rank past it is refused, not a scanner.
  std::vector<std::unique_ptr<TcpStore>> ranks;
  for (size_t i = 2; i < kCap; ++i) ranks.push_back(connect(token_));
  for (auto& rank : ranks) rank->add("ranks", 1);  // each is served, so each is counted
  EXPECT_EQ(server_->acceptedConnections(), kCap);
  EXPECT_THROW(connect(token_), PeerError);
  EXPECT_EQ(late->add("ranks", 1), int64_t(kCap - 1));
}

TEST_F(TcpStoreTest, ReplayedHandshakeIsRefused) {
  // Record a genuine client's handshake bytes by relaying them to the server.
  net::Socket relayListener = net::listenTcp("127.0.0.1", 0);
  std::vector<uint8_t> hello(40), response(40);
  auto relay = std::async(std::launch::async, [&] {
    net::Socket in = net::acceptTcp(relayListener, Deadline::after(10s));
    net::Socket out = rawConnect();
    auto d = Deadline::after(10s);
    std::vector<uint8_t> challenge(72);
    uint8_t verdict = 0;
    net::recvAll(in.fd(), hello.data(), hello.size(), d);
    net::sendAll(out.fd(), hello.data(), hello.size(), d);
    net::recvAll(out.fd(), challenge.data(), challenge.size(), d);
    net::sendAll(in.fd(), challenge.data(), challenge.size(), d);
    net::recvAll(in.fd(), response.data(), response.size(), d);
    net::sendAll(out.fd(), response.data(), response.size(), d);
    net::recvAll(out.fd(), &verdict, 1, d);
    net::sendAll(in.fd(), &verdict, 1, d);
    return out;  // the relayed, authenticated connection to the server
  });
  TcpStore recorded(net::Address{"127.0.0.1", net::boundPort(relayListener)}, token_,
                    Deadline::after(10s));
  net::Socket relayed = relay.get();
  // Once a request on it is answered, the server has counted the connection: CHECK of no keys.
  std::array<uint8_t, 9> check = {5, 0, 0, 0, /*kCheck*/ 6, 0, 0, 0, 0};
  net::sendAll(relayed.fd(), check.data(), check.size(), Deadline::after(5s));
  std::array<uint8_t, 6> answer{};
  net::recvAll(relayed.fd(), answer.data(), answer.size(), Deadline::after(5s));
  EXPECT_EQ(answer, (std::array<uint8_t, 6>{2, 0, 0, 0, /*kOk*/ 0, /*true*/ 1}));
  EXPECT_EQ(server_->acceptedConnections(), 1u);

  net::Socket attacker = rawConnect();
  auto d = Deadline::after(5s);
  std::vector<uint8_t> challenge(72);
  net::sendAll(attacker.fd(), hello.data(), hello.size(), d);
  net::recvAll(attacker.fd(), challenge.data(), challenge.size(), d);
  net::sendAll(attacker.fd(), response.data(), response.size(), d);
  expectServerCloses(attacker);
  EXPECT_EQ(server_->refusedConnections(), 1u);
  EXPECT_EQ(server_->acceptedConnections(), 1u);
}

TEST_F(TcpStoreTest, LostServerIsAPeerError) {
  auto store = connect(token_);
  store->set("k", toBytes("v"));
  server_.reset();
  for (int attempt = 0; attempt < 2; ++attempt) {  // and it stays broken, failing fast
    try {
      store->set("k", toBytes("v2"));
      FAIL() << "a request to a stopped server succeeded";
    } catch (const PeerError& error) {
      EXPECT_EQ(error.peerRank(), -1);
      std::string what = error.what();
      EXPECT_NE(what.find("closed the connection"), std::string::npos) << what;
      EXPECT_NE(what.find("did the launcher exit?"), std::string::npos) << what;
    }
  }
}

TEST_F(TcpStoreTest, ServerShutdownWakesAWaitingClient) {
  auto store = connect(token_);
  auto waiting = std::async(std::launch::async, [&] {
    auto start = Clock::now();
    EXPECT_THROW(store->get("never", Deadline::after(30s)), PeerError);
    return Clock::now() - start;
  });
  // Whether the request reached the server before it stopped or not, the client must fail
  // promptly rather than wait out its 30 s.
  server_.reset();
  EXPECT_LT(waiting.get(), 10s);
}

TEST_F(TcpStoreTest, NoServerTimesOut) {
  uint16_t port = net::boundPort(net::listenTcp("127.0.0.1", 0));
  EXPECT_THROW(TcpStore(net::Address{"127.0.0.1", port}, token_, Deadline::after(200ms)),
               TimeoutError);
}

TEST_F(TcpStoreTest, LargeValuesAndTheFrameLimit) {
  auto store = connect(token_);
  Bytes big(4u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  store->set("big", big);
  EXPECT_EQ(store->get("big", Deadline::after(10s)), big);
  Bytes tooBig(kMaxFrameBytes + 1);
  EXPECT_THROW(store->set("huge", tooBig), InvalidArgumentError);
  EXPECT_EQ(store->add("still-works", 1), 1);  // the connection is intact
}

}  // namespace
}  // namespace chorus::store
