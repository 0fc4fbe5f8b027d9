// The TCP transport's framing and matching, driven by hand over a socketpair: partial arrivals,
// padding after a failure, goodbye versus crash, and malformed input.
#include "transport/tcp/connection.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <numeric>

namespace chorus::transport::tcp {
namespace {

using Event = Connection::Event;

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = std::make_unique<Connection>(1, 0, 1, net::Socket(fds[0]));
    b = std::make_unique<Connection>(0, 1, 0, net::Socket(fds[1]));
  }
  std::unique_ptr<Connection> a;  // rank 0's end
  std::unique_ptr<Connection> b;  // rank 1's end
};

Op makeOp(bool isSend, uint64_t tag, void* data, size_t bytes) {
  Op op;
  op.isSend = isSend;
  op.peer = isSend ? 1 : 0;
  op.tag = tag;
  op.data = static_cast<char*>(data);
  op.bytes = bytes;
  return op;
}

std::vector<uint32_t> pattern(size_t count, uint32_t seed) {
  std::vector<uint32_t> values(count);
  std::iota(values.begin(), values.end(), seed);
  return values;
}

// Moves bytes both ways until `done` or no progress is possible.
template <typename Done>
void pump(Pair& pair, Done done) {
  for (int round = 0; round < 100000 && !done(); ++round) {
    pair.a->writeSome();
    pair.b->readSome();
  }
}

TEST(Connection, PartlyArrivedMessageStreamsIntoALateReceive) {
  Pair pair;
  auto out = pattern(1 << 20, 7);  // 4 MiB: far more than a socketpair holds
  std::vector<uint32_t> in(out.size(), 0);
  Op send = makeOp(true, 3, out.data(), out.size() * 4);
  Op recv = makeOp(false, 3, in.data(), in.size() * 4);
  EXPECT_EQ(pair.a->send(send), Event::kNone);
  EXPECT_FALSE(send.complete);
  EXPECT_EQ(pair.b->readSome(), Event::kNone);  // part of it, into a buffer of its own
  pair.b->recv(recv);                           // the rest goes straight into `in`
  EXPECT_FALSE(recv.complete);
  pump(pair, [&] { return recv.complete; });
  EXPECT_TRUE(send.complete);
  EXPECT_TRUE(recv.complete);
  EXPECT_EQ(in, out);
}

TEST(Connection, WholeMessageBeforeItsReceiveIsCopiedOnPost) {
  Pair pair;
  auto first = pattern(10, 1), second = pattern(20, 100);
  Op send1 = makeOp(true, 5, first.data(), 40), send2 = makeOp(true, 5, second.data(), 80);
  pair.a->send(send1);
  pair.a->send(send2);
  pump(pair, [&] { return send2.complete; });
  pair.b->readSome();
  std::vector<uint32_t> in1(10), in2(20);
  Op recv1 = makeOp(false, 5, in1.data(), 40), recv2 = makeOp(false, 5, in2.data(), 80);
  pair.b->recv(recv1);
  pair.b->recv(recv2);
  EXPECT_TRUE(recv1.complete && recv2.complete);
  EXPECT_EQ(in1, first);
  EXPECT_EQ(in2, second);
}

TEST(Connection, FingerprintAndSizeAreCheckedBeforeThePayload) {
  Pair pair;
  uint64_t value = 9;
  Op send = makeOp(true, 0, &value, 8);
  send.fingerprint.sequence = 4;
  pair.a->send(send);
  Op recv = makeOp(false, 0, &value, 8);
  recv.fingerprint.sequence = 5;
  pair.b->recv(recv);
  try {
    pair.b->readSome();
    FAIL() << "no error";
  } catch (const MismatchError& error) {
    EXPECT_EQ(error.field(), "sequence");
    EXPECT_EQ(error.ranks(), (std::vector<int>{1, 0}));
  }
  Pair other;
  Op send2 = makeOp(true, 0, &value, 8);
  other.a->send(send2);
  other.b->readSome();  // buffered
  uint32_t small = 0;
  Op recv2 = makeOp(false, 0, &small, 4);
  try {
    other.b->recv(recv2);
    FAIL() << "no error";
  } catch (const MismatchError& error) {
    EXPECT_EQ(error.field(), "bytes");
  }
}

// After a failure the half-written frame is finished with zeros, so the abort that follows can be
// parsed; the user's buffer is not read again.
TEST(Connection, DroppedHalfWrittenFrameIsPaddedBeforeTheAbort) {
  Pair pair;
  auto out = pattern(1 << 20, 3);
  std::vector<uint32_t> in(out.size(), 0xffffffff);
  Op send = makeOp(true, 1, out.data(), out.size() * 4);
  Op recv = makeOp(false, 1, in.data(), in.size() * 4);
  pair.b->recv(recv);
  pair.a->send(send);
  pair.a->dropRequests();
  std::fill(out.begin(), out.end(), 0xdeadbeef);  // must not be sent any more
  pair.a->queueControl(FrameKind::kAbort, {1, 2, 3});
  Event event = Event::kNone;
  for (int round = 0; round < 100000 && event == Event::kNone; ++round) {
    pair.a->writeSome();
    event = pair.b->readSome();
  }
  ASSERT_EQ(event, Event::kAbort);
  EXPECT_EQ(pair.b->takeAbortPayload(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_TRUE(recv.complete);
  EXPECT_FALSE(send.complete);
  for (uint32_t value : in) ASSERT_NE(value, 0xdeadbeef);
  EXPECT_EQ(in.back(), 0u);  // the padding
}

TEST(Connection, GoodbyeThenEndIsAClose) {
  Pair pair;
  pair.a->queueControl(FrameKind::kGoodbye, {});
  pair.a->flushAndClose(Deadline::after(std::chrono::seconds(1)));
  EXPECT_EQ(pair.b->readSome(), Event::kGoodbye);
  EXPECT_EQ(pair.b->state(), Connection::State::kSaidGoodbye);
  EXPECT_EQ(pair.b->readSome(), Event::kClosed);
}

TEST(Connection, EndWithoutGoodbyeIsACrash) {
  Pair pair;
  pair.a->closeNow();
  EXPECT_EQ(pair.b->readSome(), Event::kCrashed);
  EXPECT_EQ(pair.b->state(), Connection::State::kCrashed);
}

TEST(Connection, MalformedFramesArePeerErrors) {
  for (int variant = 0; variant < 3; ++variant) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    net::Socket raw(fds[0]);
    Connection b(0, 1, 0, net::Socket(fds[1]));
    FrameHeader header;
    header.magic = kFrameMagic;
    if (variant == 0)
      header.magic = 0x12345678;
    if (variant == 1)
      header.bytes = kMaxUnexpectedBytes + 1;
    if (variant == 2)
      header.kind = static_cast<FrameKind>(9);
    ASSERT_EQ(::send(raw.fd(), &header, sizeof(header), 0), ssize_t(sizeof(header)));
    try {
      b.readSome();
      ADD_FAILURE() << "variant " << variant << ": no error";
    } catch (const PeerError& error) {
      EXPECT_EQ(error.peerRank(), 0);
      EXPECT_NE(std::string(error.what()).find("malformed"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace chorus::transport::tcp
