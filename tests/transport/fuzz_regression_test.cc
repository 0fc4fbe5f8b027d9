// Regression tests for what fuzz/tcp_frame_fuzzer.cc found in the TCP transport's frame parser.
//
// Found: a data frame that arrives before its receive was buffered in an allocation of the size its
// header claims (up to kMaxUnexpectedBytes, 1 TiB), before any payload arrived. A corrupt or
// hostile header made the process reserve up to a terabyte (under a sanitizer, or without
// overcommit, an out-of-memory abort or error) from one header. The buffer now grows as bytes
// arrive.
//
// This is its own executable: it links chorus_counted_allocations, which replaces the global
// operator new to record the largest single allocation.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <vector>

#include "chorus/error.h"
#include "harness/counted_allocations.h"
#include "transport/tcp/connection.h"

namespace chorus::transport::tcp {
namespace {

using Event = Connection::Event;

struct RawPeer {
  RawPeer() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    peer = net::Socket(fds[0]);
    connection = std::make_unique<Connection>(0, 1, 0, net::Socket(fds[1]));
  }
  void send(const void* data, size_t bytes) {
    ASSERT_EQ(::send(peer.fd(), data, bytes, MSG_NOSIGNAL), static_cast<ssize_t>(bytes));
  }
  net::Socket peer;  // rank 0, writing raw bytes
  std::unique_ptr<Connection> connection;
};

FrameHeader dataHeader(uint64_t tag, uint64_t bytes) {
  FrameHeader header;
  header.magic = kFrameMagic;
  header.kind = FrameKind::kData;
  header.tag = tag;
  header.bytes = bytes;
  return header;
}

TEST(TcpFrameFuzzRegression, HugeUnexpectedHeaderCommitsNoMemory) {
  RawPeer raw;
  FrameHeader header = dataHeader(7, kMaxUnexpectedBytes);
  raw.send(&header, sizeof(header));
  std::vector<char> some(100, 'x');
  raw.send(some.data(), some.size());
  ::shutdown(raw.peer.fd(), SHUT_WR);
  chorus::testing::resetLargestAllocation();
  Event event = Event::kNone;
  for (int i = 0; i < 10 && event == Event::kNone; ++i) event = raw.connection->readSome();
  EXPECT_EQ(event, Event::kCrashed);  // the peer vanished mid-message; nothing was refused
  EXPECT_LE(chorus::testing::largestAllocation(), size_t{2} << 20);
}

// An unexpected message several times the first buffer, arriving in pieces, is delivered intact
// to a receive posted after it completed.
TEST(TcpFrameFuzzRegression, GrowingUnexpectedBufferKeepsEveryByte) {
  RawPeer raw;
  std::vector<uint32_t> out((5u << 20) / 4 + 3);  // 5 MiB + 12 bytes
  std::iota(out.begin(), out.end(), 11u);
  size_t bytes = out.size() * 4;
  FrameHeader header = dataHeader(3, bytes);
  raw.send(&header, sizeof(header));
  const char* from = reinterpret_cast<const char*>(out.data());
  for (size_t sent = 0; sent < bytes;) {
    // Pieces of assorted sizes, each read before the next is sent (a socketpair holds less).
    size_t piece = std::min(bytes - sent, size_t{3000} + sent % 70001);
    raw.send(from + sent, piece);
    sent += piece;
    ASSERT_EQ(raw.connection->readSome(), Event::kNone);
  }
  std::vector<uint32_t> in(out.size(), 0);
  Op recv;
  recv.peer = 0;
  recv.tag = 3;
  recv.data = reinterpret_cast<char*>(in.data());
  recv.bytes = bytes;
  raw.connection->recv(recv);
  EXPECT_TRUE(recv.complete);
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace chorus::transport::tcp
