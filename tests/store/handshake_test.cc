// Tests of the mutual HMAC handshake (Note [Authenticated handshake], src/core/net/handshake.h).
#include "core/net/handshake.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <future>
#include <vector>

#include "chorus/error.h"
#include "core/net/socket.h"
#include "net_test_util.h"

namespace chorus::net {
namespace {

using namespace std::chrono_literals;
using testing::connectedPair;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Runs the server side on another thread; returns its result (or rethrows its failure) via get().
std::future<uint64_t> serveAsync(int fd,
                                 std::string token,
                                 std::string purpose,
                                 uint64_t serverId,
                                 std::chrono::milliseconds timeout = 5000ms) {
  return std::async(std::launch::async, [=] {
    return serverHandshake(fd, token, purpose, serverId, Deadline::after(timeout));
  });
}

TEST(HandshakeTest, SucceedsAndExchangesIds) {
  auto [client, server] = connectedPair();
  auto served = serveAsync(server.fd(), kToken, "store", 0xABCDEF0123456789ull);
  uint64_t serverId = clientHandshake(client.fd(), kToken, "store", 7, Deadline::after(5s));
  EXPECT_EQ(serverId, 0xABCDEF0123456789ull);
  EXPECT_EQ(served.get(), 7u);

  // The connection is usable afterwards: nothing extra is left in flight.
  uint32_t word = 12345;
  sendAll(client.fd(), &word, sizeof(word), Deadline::after(5s));
  uint32_t got = 0;
  recvAll(server.fd(), &got, sizeof(got), Deadline::after(5s));
  EXPECT_EQ(got, 12345u);
}

TEST(HandshakeTest, WrongTokenIsRefusedOnBothSides) {
  auto [client, server] = connectedPair();
  auto served = serveAsync(server.fd(), kToken, "store", 1);
  std::string wrong(kToken);
  wrong.back() = '0';
  EXPECT_THROW(clientHandshake(client.fd(), wrong, "store", 2, Deadline::after(5s)), Error);
  client.close();  // what a real client does after failing
  EXPECT_THROW(served.get(), Error);
}

TEST(HandshakeTest, WrongPurposeIsRefused) {
  auto [client, server] = connectedPair();
  auto served = serveAsync(server.fd(), kToken, "store", 1);
  EXPECT_THROW(clientHandshake(client.fd(), kToken, "tcp-transport/0", 2, Deadline::after(5s)),
               Error);
  client.close();
  EXPECT_THROW(served.get(), Error);
}

TEST(HandshakeTest, ClientRefusesAServerThatSkipsTheProof) {
  auto [client, server] = connectedPair();
  auto fake = std::async(std::launch::async, [fd = server.fd()] {
    std::array<uint8_t, 40> hello{};
    recvAll(fd, hello.data(), hello.size(), Deadline::after(5s));
    std::array<uint8_t, 72> challenge{};  // zero nonce, zero id, zero MAC
    sendAll(fd, challenge.data(), challenge.size(), Deadline::after(5s));
  });
  EXPECT_THROW(clientHandshake(client.fd(), kToken, "store", 2, Deadline::after(5s)), Error);
  fake.get();
}

TEST(HandshakeTest, ReplayedClientMessagesAreRefused) {
  // Record the client's bytes of one genuine session through a relay.
  std::vector<uint8_t> hello(40);
  std::vector<uint8_t> response(40);
  {
    auto [client, relayIn] = connectedPair();
    auto [relayOut, server] = connectedPair();
    auto served = serveAsync(server.fd(), kToken, "store", 1);
    auto relay = std::async(std::launch::async, [&, in = relayIn.fd(), out = relayOut.fd()] {
      auto d = Deadline::after(5s);
      std::vector<uint8_t> challenge(72);
      uint8_t verdict = 0;
      recvAll(in, hello.data(), hello.size(), d);
      sendAll(out, hello.data(), hello.size(), d);
      recvAll(out, challenge.data(), challenge.size(), d);
      sendAll(in, challenge.data(), challenge.size(), d);
      recvAll(in, response.data(), response.size(), d);
      sendAll(out, response.data(), response.size(), d);
      recvAll(out, &verdict, 1, d);
      sendAll(in, &verdict, 1, d);
    });
    EXPECT_EQ(clientHandshake(client.fd(), kToken, "store", 9, Deadline::after(5s)), 1u);
    relay.get();
    EXPECT_EQ(served.get(), 9u);
  }

  // Replay them into a new connection: the server's nonce is fresh, so the old proof fails.
  auto [attacker, server] = connectedPair();
  auto served = serveAsync(server.fd(), kToken, "store", 1);
  auto d = Deadline::after(5s);
  std::vector<uint8_t> challenge(72);
  sendAll(attacker.fd(), hello.data(), hello.size(), d);
  recvAll(attacker.fd(), challenge.data(), challenge.size(), d);
  sendAll(attacker.fd(), response.data(), response.size(), d);
  EXPECT_THROW(served.get(), Error);
  uint8_t verdict = 1;
  try {
    recvAll(attacker.fd(), &verdict, 1, d);
    EXPECT_EQ(verdict, 0);
  } catch (const PeerError&) {
    // The server may also simply be gone; either way it did not accept.
  }
}

TEST(HandshakeTest, ServerRefusesWrongMagic) {
  auto [client, server] = connectedPair();
  auto served = serveAsync(server.fd(), kToken, "store", 1);
  std::array<uint8_t, 40> garbage;
  garbage.fill('G');
  sendAll(client.fd(), garbage.data(), garbage.size(), Deadline::after(5s));
  EXPECT_THROW(served.get(), Error);
}

TEST(HandshakeTest, StalledClientTimesOut) {
  auto [client, server] = connectedPair();
  auto served = serveAsync(server.fd(), kToken, "store", 1, 100ms);
  std::array<uint8_t, 10> partial{'C', 'H', 'O', 'R', 'U', 'S'};
  sendAll(client.fd(), partial.data(), partial.size(), Deadline::after(5s));
  EXPECT_THROW(served.get(), TimeoutError);
}

TEST(HandshakeTest, GeneratedTokensAreFreshHex) {
  std::string a = generateToken();
  std::string b = generateToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace chorus::net
