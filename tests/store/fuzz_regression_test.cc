// Regression tests for what the fuzz targets (fuzz/store_*_fuzzer.cc) found in the TCP store's
// parsing, plus the pure request decoder they drive.
//
// Found: protocol::recvFrame allocated the whole payload from the 4-byte length prefix before any
// of it arrived, so one authenticated connection could make the server (or a client) commit 64 MiB
// per frame by sending four bytes and stalling. Memory must follow the bytes that arrive.
//
// This is its own executable: it links chorus_counted_allocations, which replaces the global
// operator new to record the largest single allocation.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "core/net/socket.h"
#include "harness/counted_allocations.h"
#include "net_test_util.h"
#include "store/tcp_store.h"
#include "store/tcp_store_protocol.h"

namespace chorus::store::protocol {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> lengthPrefix(uint32_t size) {
  return {uint8_t(size), uint8_t(size >> 8), uint8_t(size >> 16), uint8_t(size >> 24)};
}

TEST(StoreFuzzRegression, LengthPrefixAloneCommitsNoMemory) {
  auto [client, server] = net::testing::connectedPair();
  std::vector<uint8_t> stream = lengthPrefix(kMaxFrameBytes);
  stream.insert(stream.end(), 100, 0x5a);  // 100 of the 64 MiB announced, then EOF
  net::sendAll(client.fd(), stream.data(), stream.size(), Deadline::after(10s));
  ::shutdown(client.fd(), SHUT_WR);
  chorus::testing::resetLargestAllocation();
  EXPECT_THROW(recvFrame(server.fd(), Deadline::after(10s), Deadline::after(10s)), PeerError);
  EXPECT_LE(chorus::testing::largestAllocation(), size_t{1} << 20);
}

TEST(StoreFuzzRegression, FrameLargerThanTheFirstChunkArrivesWhole) {
  auto [client, server] = net::testing::connectedPair();
  constexpr uint32_t kBytes = 3u << 20 | 12345;  // several doublings, and an odd remainder
  std::vector<uint8_t> stream = lengthPrefix(kBytes);
  for (uint32_t i = 0; i < kBytes; ++i) stream.push_back(uint8_t(i * 7 + i / 251));
  std::thread sender(
      [&] { net::sendAll(client.fd(), stream.data(), stream.size(), Deadline::after(10s)); });
  std::vector<uint8_t> payload = recvFrame(server.fd(), Deadline::after(10s), Deadline::after(10s));
  sender.join();
  EXPECT_EQ(payload, std::vector<uint8_t>(stream.begin() + 4, stream.end()));
}

TEST(StoreFuzzRegression, LengthOverTheLimitIsRefusedBeforeReading) {
  auto [client, server] = net::testing::connectedPair();
  std::vector<uint8_t> stream = lengthPrefix(kMaxFrameBytes + 1);
  net::sendAll(client.fd(), stream.data(), stream.size(), Deadline::after(10s));
  EXPECT_THROW(recvFrame(server.fd(), Deadline::after(10s), Deadline::after(10s)), ProtocolError);
}

// The request decoder that the server and store_request_fuzzer share.
std::vector<uint8_t> payloadOf(Writer& writer) {
  const std::vector<uint8_t>& frame = writer.frame();
  return std::vector<uint8_t>(frame.begin() + 4, frame.end());
}

TEST(StoreFuzzRegression, DecodeRequestReadsEveryField) {
  Writer compareSet;
  compareSet.u8(uint8_t(Op::kCompareSet)).string("key").bytes({1, 2}).bytes({3});
  Request request = decodeRequest(payloadOf(compareSet));
  EXPECT_EQ(request.op, Op::kCompareSet);
  EXPECT_EQ(request.key, "key");
  EXPECT_EQ(request.value, Bytes({1, 2}));
  EXPECT_EQ(request.desired, Bytes({3}));

  Writer wait;
  wait.u8(uint8_t(Op::kWait)).strings({"a", "b"}).i64(-1);
  request = decodeRequest(payloadOf(wait));
  EXPECT_EQ(request.keys, std::vector<std::string>({"a", "b"}));
  EXPECT_TRUE(request.deadline.isNever());

  Writer add;
  add.u8(uint8_t(Op::kAdd)).string("n").i64(-42);
  EXPECT_EQ(decodeRequest(payloadOf(add)).delta, -42);
}

TEST(StoreFuzzRegression, DecodeRequestRefusesMalformedPayloads) {
  EXPECT_THROW(decodeRequest({}), ProtocolError);                       // no op
  EXPECT_THROW(decodeRequest({0}), ProtocolError);                      // unknown op
  EXPECT_THROW(decodeRequest({8}), ProtocolError);                      // unknown op
  EXPECT_THROW(decodeRequest({7, 5, 0, 0, 0, 'k'}), ProtocolError);     // key overruns
  EXPECT_THROW(decodeRequest({7, 1, 0, 0, 0, 'k', 0}), ProtocolError);  // trailing byte
  // A key count that the payload cannot hold is refused before allocating for it.
  chorus::testing::resetLargestAllocation();
  EXPECT_THROW(decodeRequest({6, 0xff, 0xff, 0xff, 0x0f}), ProtocolError);
  EXPECT_LE(chorus::testing::largestAllocation(), size_t{1} << 10);
}

}  // namespace
}  // namespace chorus::store::protocol
