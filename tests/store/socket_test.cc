// Tests of the deadline-bounded TCP socket helpers (src/core/net/socket.h).
#include "core/net/socket.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "net_test_util.h"

namespace chorus::net {
namespace {

using namespace std::chrono_literals;
using testing::connectedPair;

bool hasCloseOnExec(int fd) { return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }

bool hasNoDelay(int fd) {
  int value = 0;
  socklen_t length = sizeof(value);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &length), 0);
  return value != 0;
}

// A port on 127.0.0.1 that nothing listens on (bound once, then released).
uint16_t closedPort() {
  Socket listener = listenTcp("127.0.0.1", 0);
  return boundPort(listener);
}

TEST(AddressTest, ParsesHostAndPort) {
  Address v4 = Address::parse("10.0.0.1:29500");
  EXPECT_EQ(v4.host, "10.0.0.1");
  EXPECT_EQ(v4.port, 29500);
  EXPECT_EQ(v4.toString(), "10.0.0.1:29500");

  Address named = Address::parse("node-1.cluster:0");
  EXPECT_EQ(named.host, "node-1.cluster");
  EXPECT_EQ(named.port, 0);

  Address v6 = Address::parse("[::1]:65535");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 65535);
  EXPECT_EQ(v6.toString(), "[::1]:65535");
}

TEST(AddressTest, RejectsMalformedInput) {
  for (const char* text : {"", "nohost", ":80", "host:", "host:65536", "host:12x", "host:-1",
                           "::1:80", "[::1]80", "[::1", "[]:80"}) {
    EXPECT_THROW(Address::parse(text), InvalidArgumentError) << text;
  }
}

TEST(SocketTest, ListenConnectAcceptSetOptions) {
  Socket listener = listenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.valid());
  EXPECT_TRUE(hasCloseOnExec(listener.fd()));
  EXPECT_NE(fcntl(listener.fd(), F_GETFL) & O_NONBLOCK, 0);
  int reuse = 0;
  socklen_t length = sizeof(reuse);
  ASSERT_EQ(getsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &reuse, &length), 0);
  EXPECT_NE(reuse, 0);
  uint16_t port = boundPort(listener);
  EXPECT_NE(port, 0);

  Socket client = connectTcp(Address{"127.0.0.1", port}, Deadline::after(5s));
  Socket server = acceptTcp(listener, Deadline::after(5s));
  ASSERT_TRUE(client.valid());
  ASSERT_TRUE(server.valid());
  for (int fd : {client.fd(), server.fd()}) {
    EXPECT_TRUE(hasCloseOnExec(fd));
    EXPECT_TRUE(hasNoDelay(fd));
    EXPECT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);  // both blocking
  }
  EXPECT_EQ(localAddress(client), "127.0.0.1");
}

TEST(SocketTest, LargeTransferBothWays) {
  auto [client, server] = connectedPair();
  // Larger than the kernel's socket buffers, so both sides must make progress concurrently.
  constexpr size_t kBytes = 16u << 20;
  std::vector<uint8_t> out(kBytes);
  for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<uint8_t>((i * 131) ^ (i >> 9));
  std::vector<uint8_t> in(kBytes, 0);
  auto sender = std::async(std::launch::async, [&, fd = client.fd()] {
    sendAll(fd, out.data(), out.size(), Deadline::after(20s));
  });
  recvAll(server.fd(), in.data(), in.size(), Deadline::after(20s));
  sender.get();
  EXPECT_EQ(in, out);

  // And back, on a non-blocking socket.
  server.setNonBlocking(true);
  uint32_t word = 0xC0FFEE;
  sendAll(server.fd(), &word, sizeof(word), Deadline::after(5s));
  uint32_t echoed = 0;
  recvAll(client.fd(), &echoed, sizeof(echoed), Deadline::after(5s));
  EXPECT_EQ(echoed, 0xC0FFEEu);
}

TEST(SocketTest, Ipv6LoopbackWhenAvailable) {
  Socket listener;
  try {
    listener = listenTcp("::1", 0);
  } catch (const Error&) {
    GTEST_SKIP() << "no IPv6 loopback on this machine";
  }
  Address address = Address::parse("[::1]:" + std::to_string(boundPort(listener)));
  Socket client = connectTcp(address, Deadline::after(5s));
  Socket server = acceptTcp(listener, Deadline::after(5s));
  uint8_t byte = 42;
  sendAll(client.fd(), &byte, 1, Deadline::after(5s));
  uint8_t got = 0;
  recvAll(server.fd(), &got, 1, Deadline::after(5s));
  EXPECT_EQ(got, 42);
  EXPECT_EQ(localAddress(client), "::1");
}

TEST(SocketTest, ConnectTimesOutNamingTheAddress) {
  uint16_t port = closedPort();
  auto start = Clock::now();
  try {
    connectTcp(Address{"127.0.0.1", port}, Deadline::after(300ms));
    FAIL() << "connected to a closed port";
  } catch (const TimeoutError& error) {
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << error.what();
  }
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 3s);
}

TEST(SocketTest, ConnectRetriesUntilTheServerStarts) {
  uint16_t port = closedPort();
  std::promise<void> listening;
  std::thread server([&] {
    std::this_thread::sleep_for(150ms);  // the server starts late; connectTcp must keep trying
    Socket listener = listenTcp("127.0.0.1", port);
    listening.set_value();
    Socket accepted = acceptTcp(listener, Deadline::after(10s));
    uint8_t byte = 0;
    if (accepted.valid())
      recvAll(accepted.fd(), &byte, 1, Deadline::after(10s));
  });
  Socket client = connectTcp(Address{"127.0.0.1", port}, Deadline::after(10s));
  listening.get_future().wait();
  uint8_t byte = 1;
  sendAll(client.fd(), &byte, 1, Deadline::after(5s));
  server.join();
}

TEST(SocketTest, AcceptTimesOutWithInvalidSocket) {
  Socket listener = listenTcp("127.0.0.1", 0);
  Socket accepted = acceptTcp(listener, Deadline::after(50ms));
  EXPECT_FALSE(accepted.valid());
}

TEST(SocketTest, ReceiveTimesOut) {
  auto [client, server] = connectedPair();
  uint8_t buffer[4];
  auto start = Clock::now();
  EXPECT_THROW(recvAll(server.fd(), buffer, sizeof(buffer), Deadline::after(100ms)), TimeoutError);
  EXPECT_GE(Clock::now() - start, 100ms);
}

TEST(SocketTest, SendTimesOutWhenThePeerDoesNotRead) {
  auto [client, server] = connectedPair();
  std::vector<uint8_t> big(64u << 20);
  EXPECT_THROW(sendAll(client.fd(), big.data(), big.size(), Deadline::after(200ms)), TimeoutError);
}

TEST(SocketTest, PeerCloseIsPeerError) {
  auto [client, server] = connectedPair();
  server.close();
  uint8_t buffer[8];
  try {
    recvAll(client.fd(), buffer, sizeof(buffer), Deadline::after(5s));
    FAIL() << "received from a closed connection";
  } catch (const PeerError& error) {
    EXPECT_EQ(error.peerRank(), -1);
    EXPECT_NE(std::string(error.what()).find("closed by the peer"), std::string::npos)
        << error.what();
  }
  // Writing to a closed connection fails too (with EPIPE/ECONNRESET), without SIGPIPE.
  std::vector<uint8_t> big(8u << 20);
  EXPECT_THROW(sendAll(client.fd(), big.data(), big.size(), Deadline::after(5s)), PeerError);
}

TEST(SocketTest, MoveTransfersOwnership) {
  auto [client, server] = connectedPair();
  int fd = client.fd();
  Socket moved(std::move(client));
  EXPECT_FALSE(client.valid());
  EXPECT_EQ(moved.fd(), fd);
  Socket assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.fd(), fd);
  assigned.close();
  EXPECT_FALSE(assigned.valid());
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // really closed
}

}  // namespace
}  // namespace chorus::net
