// The transport conformance suite, written once for every transport: each case is one body that
// every member of a group runs for its own rank (conformance.h), checking its own results. The
// test programs instantiate it with their group factories: threads and forked processes
// (conformance_test.cc), mpirun (mpi_conformance_test.cc). Expected values are closed forms of
// rank, peer and index. A case that needs what a factory's transports cannot do skips, saying
// why (Capabilities).
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "conformance.h"

namespace chorus::transport::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The index of the first element of `in` that differs from expected(i), or in.size(): a plain loop
// that checks 64 MiB fast also under the sanitizers, where a gtest assertion per element does not.
template <typename T, typename Expected>
size_t firstMismatch(const std::vector<T>& in, Expected expected) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != expected(i))
      return i;
  }
  return in.size();
}

// Moving and checking tens of MiB takes a while under the sanitizers on a loaded machine.
constexpr seconds kLargeLimit{60};
constexpr auto kLargeWait = kLargeLimit - seconds(10);

constexpr const char* kNeedsEarlySends =
    "needs small sends that complete before their receive; this transport's wait for it";

TEST_P(Conformance, PingPong) {
  run([&](Transport& t, Member& m) {
    const int rank = t.rank();
    EXPECT_EQ(rank, m.rank());
    EXPECT_EQ(t.size(), size());
    EXPECT_EQ(t.name(), group().transportName());
    if (rank == 0) {
      for (int peer = 1; peer < size(); ++peer) {
        int64_t value = 1000 + peer;
        send(t, peer, 7, &value, sizeof(value), stamp());
        int64_t reply = 0;
        recv(t, peer, 7, &reply, sizeof(reply), stamp());
        EXPECT_EQ(reply, 2 * (1000 + peer) + peer);
      }
    } else {
      int64_t value = 0;
      recv(t, 0, 7, &value, sizeof(value), stamp());
      EXPECT_EQ(value, 1000 + rank);
      value = 2 * value + rank;
      send(t, 0, 7, &value, sizeof(value), stamp());
    }
  });
}

// Each rank sends kMessages messages of varying sizes to its right neighbour with one tag; the
// receiver posts them in batches (some arrive before their receive, some after) and checks order.
TEST_P(Conformance, FifoOrderOnOneTag) {
  if (!can().smallSendsCompleteEarly)
    GTEST_SKIP() << kNeedsEarlySends;
  constexpr int kMessages = 200;
  auto length = [](int i) { return static_cast<size_t>((i * 37) % 300); };  // 0..299 int32s
  static_assert(299 * 4 <= kSmallMessage);
  run([&](Transport& t, Member&) {
    const int right = (t.rank() + 1) % size();
    const int left = (t.rank() + size() - 1) % size();
    std::vector<std::vector<int32_t>> out(kMessages), in(kMessages);
    std::vector<Request> sends(kMessages), recvs(kMessages);
    std::vector<Request*> all;
    for (int i = 0; i < kMessages; ++i) {
      out[i].resize(length(i));
      std::iota(out[i].begin(), out[i].end(), t.rank() * 100000 + i * 1000);
      in[i].assign(length(i), -1);
      t.postSend(right, 3, stamp(), out[i].data(), out[i].size() * 4, sends[i]);
      all.push_back(&sends[i]);
    }
    for (int i = 0; i < kMessages; ++i) {
      t.postRecv(left, 3, stamp(), in[i].data(), in[i].size() * 4, recvs[i]);
      all.push_back(&recvs[i]);
      if (i % 50 == 49)
        t.wait(std::span(all), soon()), all.clear();
    }
    t.wait(std::span(all), soon());
    for (int i = 0; i < kMessages; ++i) {
      for (size_t j = 0; j < in[i].size(); ++j) {
        ASSERT_EQ(in[i][j], static_cast<int32_t>(left * 100000 + i * 1000 + j)) << i << " " << j;
      }
      EXPECT_TRUE(sends[i].done && recvs[i].done);
    }
  });
}

// kMessages messages of sizes on both sides of an inline limit (MPI: 4 KiB) go to the right
// neighbour on one tag; all receives are posted before any wait, then waited in batches, last
// first.
TEST_P(Conformance, FifoOrderAcrossSizes) {
  constexpr int kMessages = 120;
  auto length = [](int i) { return static_cast<size_t>((i * 337) % 3000); };  // int32s
  run([&](Transport& t, Member&) {
    const int right = (t.rank() + 1) % size(), left = (t.rank() + size() - 1) % size();
    std::vector<std::vector<int32_t>> out(kMessages), in(kMessages);
    std::vector<Request> sends(kMessages), recvs(kMessages);
    std::vector<Request*> all;
    for (int i = 0; i < kMessages; ++i) {
      out[i].resize(length(i));
      std::iota(out[i].begin(), out[i].end(), t.rank() * 10000000 + i * 10000);
      in[i].assign(length(i), -1);
      t.postSend(right, 3, stamp(), out[i].data(), out[i].size() * 4, sends[i]);
      t.postRecv(left, 3, stamp(), in[i].data(), in[i].size() * 4, recvs[i]);
    }
    for (int i = kMessages - 1; i >= 0; --i) {
      all.push_back(&recvs[i]);
      all.push_back(&sends[i]);
      if (i % 40 == 0)
        t.wait(std::span(all), soon()), all.clear();
    }
    for (int i = 0; i < kMessages; ++i) {
      for (size_t j = 0; j < in[i].size(); ++j) {
        ASSERT_EQ(in[i][j], static_cast<int32_t>(left * 10000000 + i * 10000 + j)) << i << " " << j;
      }
    }
  });
}

// Sends go out with point-to-point tags 0..9 and collective tags kCollectiveTag + 0..9;
// receives are posted in the reverse order.
TEST_P(Conformance, TagsMatchIndependently) {
  constexpr int kTags = 20;
  auto chorusTag = [](int tag) { return tag < 10 ? uint64_t(tag) : kCollectiveTag + (tag - 10); };
  run([&](Transport& t, Member&) {
    std::vector<uint64_t> out(kTags * size()), in(kTags * size(), 0);
    std::vector<Request> requests(2 * kTags * size());
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      for (int tag = 0; tag < kTags; ++tag) {
        int slot = peer * kTags + tag;
        out[slot] = (uint64_t(t.rank()) << 32) | (uint64_t(peer) << 16) | uint64_t(tag);
        t.postSend(peer, chorusTag(tag), stamp(), &out[slot], 8, requests[2 * slot]);
        pointers.push_back(&requests[2 * slot]);
      }
      for (int tag = kTags - 1; tag >= 0; --tag) {
        int slot = peer * kTags + tag;
        t.postRecv(peer, chorusTag(tag), stamp(), &in[slot], 8, requests[2 * slot + 1]);
        pointers.push_back(&requests[2 * slot + 1]);
      }
    }
    t.wait(pointers, soon());
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      for (int tag = 0; tag < kTags; ++tag) {
        EXPECT_EQ(in[peer * kTags + tag],
                  (uint64_t(peer) << 32) | (uint64_t(t.rank()) << 16) | uint64_t(tag));
      }
    }
  });
}

// Zero-byte messages with a point-to-point tag and with a collective tag, to and from everyone.
TEST_P(Conformance, ZeroByteMessages) {
  run([&](Transport& t, Member&) {
    std::vector<Request> requests(4 * size());
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      for (int k = 0; k < 2; ++k) {
        const uint64_t tag = k == 0 ? 0 : kCollectiveTag;
        t.postSend(peer, tag, stamp(), nullptr, 0, requests[4 * peer + 2 * k]);
        t.postRecv(peer, tag, stamp(), nullptr, 0, requests[4 * peer + 2 * k + 1]);
        pointers.push_back(&requests[4 * peer + 2 * k]);
        pointers.push_back(&requests[4 * peer + 2 * k + 1]);
      }
    }
    t.wait(pointers, soon());
    for (Request* request : pointers) EXPECT_TRUE(request->done);
  });
}

// Ranks 0 and 1 send each other 64 MiB at once: neither may wait for the other to read first.
TEST_P(Conformance, LargeMessagesBothWays) {
  if (size() == 3 || size() == 4)
    GTEST_SKIP() << "only ranks 0 and 1 take part; sizes 2, 8 suffice (all pairs: next case)";
  constexpr size_t kCount = (64 << 20) / sizeof(uint32_t);
  auto body = [&](Transport& t, Member&) {
    if (t.rank() > 1)
      return;
    const int peer = 1 - t.rank();
    std::vector<uint32_t> out(kCount), in(kCount, 0);
    for (size_t i = 0; i < kCount; ++i) out[i] = static_cast<uint32_t>(i * 2654435761u) ^ t.rank();
    Request sendRequest, recvRequest;
    t.postSend(peer, 1, stamp(1, kCount), out.data(), kCount * 4, sendRequest);
    t.postRecv(peer, 1, stamp(1, kCount), in.data(), kCount * 4, recvRequest);
    Request* both[] = {&sendRequest, &recvRequest};
    t.wait(both, Deadline::after(kLargeWait));
    auto expected = [&](size_t i) {
      return static_cast<uint32_t>(i * 2654435761u) ^ uint32_t(peer);
    };
    const size_t wrong = firstMismatch(in, expected);
    ASSERT_EQ(wrong, kCount) << "element " << wrong << " is " << in[wrong] << ", not "
                             << expected(wrong);
  };
  run(body, kLargeLimit);
}

// Every pair exchanges 16 MiB at once (4 MiB above 4 ranks, to bound memory): nobody may wait for
// the other to read first.
TEST_P(Conformance, LargeMessagesAmongAllPairs) {
  const size_t count = ((size() <= 4 ? size_t{16} : size_t{4}) << 20) / sizeof(uint32_t);
  auto value = [](size_t i, int from, int to) {
    return static_cast<uint32_t>(i * 2654435761u) ^ uint32_t(from * 16 + to);
  };
  auto body = [&](Transport& t, Member&) {
    std::vector<std::vector<uint32_t>> out(size()), in(size());
    std::vector<Request> requests(2 * size());
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      out[peer].resize(count);
      in[peer].assign(count, 0);
      for (size_t i = 0; i < count; ++i) out[peer][i] = value(i, t.rank(), peer);
      t.postSend(peer, kCollectiveTag, stamp(1, count), out[peer].data(), count * 4,
                 requests[2 * peer]);
      t.postRecv(peer, kCollectiveTag, stamp(1, count), in[peer].data(), count * 4,
                 requests[2 * peer + 1]);
      pointers.push_back(&requests[2 * peer]);
      pointers.push_back(&requests[2 * peer + 1]);
    }
    t.wait(pointers, Deadline::after(kLargeWait));
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      auto expected = [&](size_t i) { return value(i, peer, t.rank()); };
      const size_t wrong = firstMismatch(in[peer], expected);
      ASSERT_EQ(wrong, count) << "from rank " << peer << ", element " << wrong << " is "
                              << in[peer][wrong] << ", not " << expected(wrong);
    }
  };
  run(body, kLargeLimit);
}

// Rank 1 posts a small and a large message on tag 1, then one on tag 2, before rank 0 posts any
// receive (a barrier between); rank 0 takes tag 2 first, so both tag-1 messages must be kept,
// then delivered in order. Rank 1 waits for its sends only after the barrier: a transport with
// bounded buffers (shm: a 1 MiB ring) completes a 3 MiB send only while the receiver drains it,
// and a rendezvous transport only once each is matched, which the contract allows.
TEST_P(Conformance, MessagesBeforeTheirReceive) {
  constexpr size_t kLarge = 3 << 20;
  run([&](Transport& t, Member& m) {
    if (t.rank() == 1) {
      std::vector<uint8_t> small(100, 11), large(kLarge, 22);
      uint8_t last = 33;
      Request requests[3];
      t.postSend(0, 1, stamp(), small.data(), small.size(), requests[0]);
      t.postSend(0, 1, stamp(), large.data(), large.size(), requests[1]);
      t.postSend(0, 2, stamp(), &last, 1, requests[2]);
      m.barrier();
      Request* all[] = {&requests[0], &requests[1], &requests[2]};
      t.wait(all, soon());
      return;
    }
    m.barrier();
    if (t.rank() == 0) {
      uint8_t last = 0;
      recv(t, 1, 2, &last, 1, stamp());
      EXPECT_EQ(last, 33);
      std::vector<uint8_t> small(100, 0), large(kLarge, 0);
      recv(t, 1, 1, small.data(), small.size(), stamp());
      recv(t, 1, 1, large.data(), large.size(), stamp());
      EXPECT_EQ(small, std::vector<uint8_t>(100, 11));
      EXPECT_EQ(large, std::vector<uint8_t>(kLarge, 22));
    }
  });
}

TEST_P(Conformance, RequestsCanBeReused) {
  run([&](Transport& t, Member&) {
    if (t.rank() > 1)
      return;
    const int peer = 1 - t.rank();
    Request sendRequest, recvRequest;
    for (int i = 0; i < 100; ++i) {
      int out = i * 10 + t.rank(), in = -1;
      t.postSend(peer, 0, stamp(i), &out, sizeof(out), sendRequest);
      t.postRecv(peer, 0, stamp(i), &in, sizeof(in), recvRequest);
      Request* both[] = {&sendRequest, &recvRequest};
      t.wait(both, soon());
      ASSERT_EQ(in, i * 10 + peer);
    }
  });
}

// Bad peers, an unposted request and (where the transport limits tags) tags past its limits are
// InvalidArgumentError and leave the transport healthy: a ping on the largest tag still works.
TEST_P(Conformance, InvalidArgumentsChangeNothing) {
  const auto& limits = can().tagLimits;
  const uint64_t largestTag = limits ? limits->largestPointToPoint : kCollectiveTag - 1;
  run([&](Transport& t, Member&) {
    const int right = (t.rank() + 1) % size(), left = (t.rank() + size() - 1) % size();
    int value = 0;
    Request request;
    EXPECT_THROW(t.postSend(t.rank(), 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postSend(size(), 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postRecv(-1, 0, stamp(), &value, 4, request), InvalidArgumentError);
    if (limits) {
      EXPECT_THROW(t.postSend(right, largestTag + 1, stamp(), &value, 4, request),
                   InvalidArgumentError);
      EXPECT_THROW(
          t.postSend(right, kCollectiveTag + limits->collectiveTags, stamp(), &value, 4, request),
          InvalidArgumentError);
    }
    Request never;
    Request* list[] = {&never};
    EXPECT_THROW(t.wait(list, soon()), InvalidArgumentError);
    EXPECT_EQ(t.failure(), nullptr);
    // Still healthy: a ping with the next rank works, on the smallest and the largest tag.
    for (uint64_t tag : {uint64_t{0}, largestTag}) {
      int in = -1, out = t.rank();
      Request requests[2];
      t.postSend(right, tag, stamp(), &out, 4, requests[0]);
      t.postRecv(left, tag, stamp(), &in, 4, requests[1]);
      Request* both[] = {&requests[0], &requests[1]};
      t.wait(both, soon());
      EXPECT_EQ(in, left) << "tag " << tag;
    }
  });
}

// Rank 1 sends rank 0 a message stamped `sent` of `sentBytes`; rank 0 expects stamp(7, 8) and 32
// bytes. Everyone else waits on a receive that never comes; all must fail promptly with
// MismatchError, and later calls throw it again.
void checkMismatchReachesEveryone(GroupFactory& group,
                                  const Fingerprint& sent,
                                  size_t sentBytes,
                                  const std::string& field,
                                  const std::string& detail) {
  group.run([&](Transport& t, Member&) {
    const int size = t.size();
    auto start = Clock::now();
    auto error = attempt([&] {
      std::vector<uint8_t> buffer(64, 0);
      if (t.rank() == 1) {
        Request request;
        t.postSend(0, 5, sent, buffer.data(), sentBytes, request);
        waitOne(t, request);
      }
      Request request;
      if (t.rank() == 0) {
        t.postRecv(1, 5, stamp(7, 8), buffer.data(), 32, request);
      } else {
        t.postRecv((t.rank() + 1) % size, 9, stamp(), buffer.data(), 1, request);
      }
      waitOne(t, request, Deadline::after(seconds(10)));
    });
    EXPECT_LT(Clock::now() - start, seconds(3)) << "the mismatch was not spread promptly";
    if (t.rank() == 0) {
      if (const auto* e = expectError<MismatchError>(error)) {
        EXPECT_EQ(e->field(), field);
        EXPECT_EQ(e->ranks(), (std::vector<int>{0, 1}));
        EXPECT_NE(std::string(e->what()).find(detail), std::string::npos) << e->what();
        EXPECT_NE(std::string(e->what()).find("rank 0 (this process)"), std::string::npos);
      }
    } else {
      expectErrorMentions<MismatchError>(error, "aborted because rank 0 reported");
    }
    // Failure is final: every later call throws the same error type.
    Request request;
    int value = 0;
    EXPECT_THROW(t.postSend((t.rank() + 1) % size, 0, stamp(), &value, 4, request), MismatchError);
    EXPECT_NE(t.failure(), nullptr);
  });
}

TEST_P(Conformance, FingerprintMismatchFailsEveryRank) {
  checkMismatchReachesEveryone(group(), stamp(7, 7), 32, "count",
                               "count is 8 here but 7 on rank 1");
}

TEST_P(Conformance, ByteCountMismatchFailsEveryRank) {
  checkMismatchReachesEveryone(group(), stamp(7, 8), 40, "bytes",
                               "expected a message of 32 bytes from rank 1 but rank 1 sent 40");
}

// Rank 0 waits 300 ms on the last rank, which says nothing; rank 1 waits on rank 0, which tells it.
TEST_P(Conformance, TimeoutNamesTheSilentPeer) {
  run([&](Transport& t, Member&) {
    const int last = size() - 1;
    auto start = Clock::now();
    auto error = attempt([&] {
      int value = 0;
      Request request;
      if (t.rank() == 0) {
        t.postRecv(last, 0, stamp(), &value, 4, request);
        waitOne(t, request, Deadline::after(milliseconds(300)));
      } else if (t.rank() == 1) {
        t.postRecv(0, 0, stamp(), &value, 4, request);  // rank 0 times out, then tells rank 1
        waitOne(t, request, Deadline::after(seconds(10)));
      }
    });
    EXPECT_LT(Clock::now() - start, seconds(3));
    if (t.rank() == 0) {
      if (const auto* e = expectError<TimeoutError>(error)) {
        EXPECT_EQ(e->missingRanks(), std::vector<int>{last});
        std::string expected = "waiting for rank " + std::to_string(last) + ";";
        EXPECT_NE(std::string(e->what()).find(expected), std::string::npos) << e->what();
      }
    } else if (t.rank() == 1) {
      expectErrorMentions<TimeoutError>(error, "aborted because rank 0 reported");
    } else {
      expectOk(error);
    }
  });
}

// Rank 0's second thread aborts while its first waits; every rank fails with the same type, and
// later calls throw it again.
TEST_P(Conformance, AbortFromAnotherThreadWakesTheWaiter) {
  run([&](Transport& t, Member&) {
    const int right = (t.rank() + 1) % size();
    auto start = Clock::now();
    auto error = attempt([&] {
      int value = 0;
      Request request;
      t.postRecv(right, 0, stamp(), &value, 4, request);
      std::jthread aborter;
      if (t.rank() == 0) {
        aborter = std::jthread([&t] {
          std::this_thread::sleep_for(milliseconds(100));  // most likely inside wait() by now
          t.abort(std::make_exception_ptr(UnsupportedError("stop right there")));
        });
      }
      waitOne(t, request, Deadline::after(seconds(10)));
    });
    EXPECT_LT(Clock::now() - start, seconds(3));
    if (t.rank() == 0) {
      expectErrorMentions<UnsupportedError>(error, "stop right there");
    } else {
      expectErrorMentions<UnsupportedError>(error,
                                            "aborted because rank 0 reported: stop right there");
    }
    Request request;
    int value = 0;
    EXPECT_THROW(t.postRecv(right, 0, stamp(), &value, 4, request), UnsupportedError);
  });
}

// waitSome() returns once one of its requests is complete, and leaves the other posted: here the
// message from the right is sent only after the barrier, which every rank passes after waitSome().
TEST_P(Conformance, WaitSomeReturnsWhenOneRequestIsComplete) {
  run([&](Transport& t, Member& m) {
    const int right = (t.rank() + 1) % size();
    const int left = (t.rank() + size() - 1) % size();
    int64_t fromLeft = -1, fromRight = -1;
    const int64_t toRight = 100 + t.rank(), toLeft = 200 + t.rank();
    Request recvLeft, recvRight, sendRight, sendLeft;
    t.postRecv(left, 1, stamp(), &fromLeft, 8, recvLeft);
    t.postRecv(right, 2, stamp(), &fromRight, 8, recvRight);
    t.postSend(right, 1, stamp(), &toRight, 8, sendRight);
    Request* const both[] = {&recvLeft, &recvRight};
    EXPECT_TRUE(t.waitSome(both, soon()));
    EXPECT_TRUE(recvLeft.done);
    EXPECT_FALSE(recvRight.done);
    EXPECT_EQ(fromLeft, 100 + left);
    m.barrier();
    t.postSend(left, 2, stamp(), &toLeft, 8, sendLeft);
    Request* const rest[] = {&recvRight, &sendRight, &sendLeft};
    t.wait(rest, soon());
    EXPECT_EQ(fromRight, 200 + right);
  });
}

// interrupt() makes a waitSome() that waits return false at once (it wakes a waiter that sleeps),
// the request still posted and the transport healthy; one that comes before waitSome() is kept
// for it.
TEST_P(Conformance, InterruptEndsWaitSomeWithoutFailing) {
  run([&](Transport& t, Member& m) {
    const int right = (t.rank() + 1) % size();
    const int left = (t.rank() + size() - 1) % size();
    int64_t value = -1;
    Request request;
    t.postRecv(left, 0, stamp(), &value, 8, request);
    Request* const one[] = {&request};
    t.interrupt();
    EXPECT_FALSE(t.waitSome(one, soon()));
    {
      const auto start = Clock::now();
      std::jthread interrupter([&t] {
        std::this_thread::sleep_for(milliseconds(50));  // most likely inside waitSome() by now
        t.interrupt();
      });
      EXPECT_FALSE(t.waitSome(one, Deadline::after(seconds(20))));  // woken, not timed out
      EXPECT_LT(Clock::now() - start, seconds(3));
    }
    EXPECT_FALSE(request.done);
    EXPECT_EQ(t.failure(), nullptr);
    m.barrier();
    const int64_t mine = 300 + t.rank();
    send(t, right, 0, &mine, 8, stamp());
    waitOne(t, request);
    EXPECT_EQ(value, 300 + left);
  });
}

// poll() moves a posted receive along without a wait: rank 0 polls until the last element of a
// 4 MiB message (more than a ring, a socket buffer or an eager message holds) has landed, while
// rank 1 waits for its send, which cannot finish before rank 0 has taken the bytes. A wait then
// finds the receive complete.
TEST_P(Conformance, PollMovesAPostedReceiveWithoutAWait) {
  if (group().transportName() == "loopback")
    GTEST_SKIP() << "the sender's thread delivers into the receive: nothing to poll";
  if (size() > 2)
    GTEST_SKIP() << "only ranks 0 and 1 take part: size 2 suffices";
  constexpr size_t kCount = (4 << 20) / sizeof(uint32_t);
  auto value = [](size_t i) { return static_cast<uint32_t>(i * 2654435761u) | 1u; };  // never 0
  run(
      [&](Transport& t, Member&) {
        if (t.rank() == 1) {
          std::vector<uint32_t> out(kCount);
          for (size_t i = 0; i < kCount; ++i) out[i] = value(i);
          Request request;
          t.postSend(0, 3, stamp(3, kCount), out.data(), kCount * 4, request);
          waitOne(t, request, Deadline::after(kLargeWait));
          return;
        }
        std::vector<uint32_t> in(kCount, 0);
        Request request;
        t.postRecv(1, 3, stamp(3, kCount), in.data(), kCount * 4, request);
        const Deadline deadline = Deadline::after(kLargeWait);
        while (in.back() == 0 && !deadline.expired()) {
          t.poll();  // writes `in` on this thread, if at all
          std::this_thread::yield();
        }
        ASSERT_EQ(in.back(), value(kCount - 1)) << "poll() never moved the message's last bytes";
        EXPECT_FALSE(request.done);  // marked by the wait that names it
        waitOne(t, request);
        const size_t wrong = firstMismatch(in, value);
        ASSERT_EQ(wrong, kCount) << "element " << wrong << " is " << in[wrong];
      },
      kLargeLimit);
}

// The last rank sends one message and closes. Rank 0 still gets that message, and messages the
// other ranks send afterwards, but a further receive from the closed rank fails with PeerError
// naming it.
TEST_P(Conformance, GoodbyeOnlyFailsRequestsOnThatPeer) {
  if (!can().smallSendsCompleteEarly)
    GTEST_SKIP() << kNeedsEarlySends;
  run([&](Transport& t, Member& m) {
    const int leaver = size() - 1;
    int value = 0;
    if (t.rank() == leaver) {
      value = 77;
      send(t, 0, 4, &value, 4, stamp());
      t.close();
      t.close();                        // idempotent
      EXPECT_NE(t.failure(), nullptr);  // calls after close throw
      m.barrier();
      return;
    }
    m.barrier();  // the leaver has closed
    if (t.rank() != 0) {
      value = 100 + t.rank();
      auto error = attempt([&] { send(t, 0, 4, &value, 4, stamp()); });
      // Their send is done, but rank 0's failure may reach them before their wait() returns.
      if (error)
        expectErrorMentions<PeerError>(error, "aborted because rank 0 reported");
      return;
    }
    for (int peer = 1; peer < leaver; ++peer) {
      recv(t, peer, 4, &value, 4, stamp());
      EXPECT_EQ(value, 100 + peer);
    }
    recv(t, leaver, 4, &value, 4, stamp());
    EXPECT_EQ(value, 77);
    auto error = attempt([&] { recv(t, leaver, 4, &value, 4, stamp()); });
    if (const auto* e = expectError<PeerError>(error)) {
      EXPECT_EQ(e->peerRank(), leaver);
      std::string expected = "rank " + std::to_string(leaver) + " has closed its communicator";
      EXPECT_NE(std::string(e->what()).find(expected), std::string::npos) << e->what();
    }
  });
}

// The last rank vanishes without goodbye while the others wait on each other (not on it): all must
// fail with PeerError naming it, within about a second.
TEST_P(Conformance, CrashIsNoticedByEveryRank) {
  if (!can().canCrash)
    GTEST_SKIP() << "a member cannot vanish without ending the job (mpirun kills it)";
  run([&](Transport& t, Member& m) {
    const int dead = size() - 1;
    if (t.rank() == dead) {
      std::this_thread::sleep_for(milliseconds(50));  // let the others start waiting
      m.crash();
      return;
    }
    auto start = Clock::now();
    auto error = attempt([&] {
      int value = 0;
      Request request;
      int peer = size() == 2 ? dead : (t.rank() + 1) % dead;
      t.postRecv(peer, 0, stamp(), &value, 4, request);
      waitOne(t, request, Deadline::after(seconds(10)));
    });
    EXPECT_LT(Clock::now() - start, milliseconds(1500));
    if (const auto* e = expectError<PeerError>(error)) {
      EXPECT_EQ(e->peerRank(), dead) << e->what();
      std::string expected = "rank " + std::to_string(dead) + " closed its connection unexpectedly";
      EXPECT_NE(std::string(e->what()).find(expected), std::string::npos) << e->what();
    }
  });
}

// Destroying a transport closes it: the peer gets what was sent, then PeerError on further
// receives.
TEST_P(Conformance, DestroyingSaysGoodbye) {
  if (!can().smallSendsCompleteEarly)
    GTEST_SKIP() << kNeedsEarlySends;
  run([&](Transport& t, Member& m) {
    if (t.rank() == 1) {
      int value = 5;
      send(t, 0, 0, &value, 4, stamp());
      m.destroyTransport();  // destructor: goodbye
      m.barrier();
      return;
    }
    m.barrier();
    if (t.rank() != 0)
      return;
    int value = 0;
    recv(t, 1, 0, &value, 4, stamp());
    EXPECT_EQ(value, 5);
    auto error = attempt([&] { recv(t, 1, 0, &value, 4, stamp()); });
    if (const auto* e = expectError<PeerError>(error)) {
      EXPECT_EQ(e->peerRank(), 1);
      EXPECT_NE(std::string(e->what()).find("has closed its communicator"), std::string::npos);
    }
  });
}

// Where every send waits for its receive (the rendezvous loopback the algorithm tests run on), a
// send whose receive is never posted does not complete; its wait times out naming the receiver.
TEST_P(Conformance, RendezvousSendWaitsForItsReceive) {
  if (!can().sendsWaitForTheirReceive)
    GTEST_SKIP() << "sends may complete before their receive";
  run([&](Transport& t, Member&) {
    if (t.rank() != 1)
      return;
    auto error = attempt([&] {
      int value = 1;
      Request request;
      t.postSend(0, 0, stamp(), &value, sizeof(value), request);
      waitOne(t, request, Deadline::after(milliseconds(100)));
    });
    if (const auto* e = expectError<TimeoutError>(error)) {
      EXPECT_EQ(e->missingRanks(), std::vector<int>{0});
    }
  });
}

// Groups made one after another, each aborted with messages still in flight (never received),
// must not disturb the next one's message order (for MPI, which reuses one communicator's context
// ids: Note [Retiring an MPI communicator]). Fewer rounds above 4 ranks, where forming a group
// costs most (shm: 1 MiB rings, pre-faulted, per ordered pair).
TEST_P(Conformance, LeftoverMessagesDoNotReachTheNextTransport) {
  const int rounds = size() <= 4 ? 20 : 5;
  for (int round = 0; round < rounds; ++round) {
    run([&](Transport& t, Member& m) {
      const int right = (t.rank() + 1) % size(), left = (t.rank() + size() - 1) % size();
      std::vector<int32_t> out(64), in(64, -1), stray(5000, 7);
      Request requests[3];
      // Never received: a small and a large message on the tag the next round uses.
      t.postSend(right, 1, stamp(), stray.data(), 8, requests[2]);
      Request large;
      t.postSend(right, 1, stamp(), stray.data(), stray.size() * 4, large);
      std::iota(out.begin(), out.end(), round * 1000 + t.rank() * 100);
      t.postSend(right, 0, stamp(round), out.data(), out.size() * 4, requests[0]);
      t.postRecv(left, 0, stamp(round), in.data(), in.size() * 4, requests[1]);
      Request* both[] = {&requests[0], &requests[1]};
      t.wait(both, soon());
      for (int i = 0; i < 64; ++i) ASSERT_EQ(in[i], round * 1000 + left * 100 + i);
      m.barrier();  // nobody is waiting any more: the abort fails no one
      t.abort(std::make_exception_ptr(Error("end of round")));  // forgets the stray sends
    });
  }
}

}  // namespace
}  // namespace chorus::transport::testing
