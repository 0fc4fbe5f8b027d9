// The transport conformance suite: every transport (loopback, tcp, shm) must pass it, at sizes 2,
// 3, 4 and 8. Expected values are closed forms of rank, peer and index. Every wait has a deadline,
// and runRanks aborts the group if a rank is stuck, so a broken transport fails fast instead of
// hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "transport_group.h"

namespace chorus::transport::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Param {
  std::string kind;
  int size;
};

void PrintTo(const Param& param, std::ostream* out) { *out << param.kind << " x" << param.size; }

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.kind + "_" + std::to_string(info.param.size);
}

Deadline soon() { return Deadline::after(seconds(10)); }

void waitOne(Transport& transport, Request& request, Deadline deadline = soon()) {
  Request* requests[] = {&request};
  transport.wait(requests, deadline);
}

void send(Transport& t, int peer, uint64_t tag, const void* data, size_t bytes, Fingerprint fp) {
  Request request;
  t.postSend(peer, tag, fp, data, bytes, request);
  waitOne(t, request);
}

void recv(Transport& t, int peer, uint64_t tag, void* data, size_t bytes, Fingerprint fp) {
  Request request;
  t.postRecv(peer, tag, fp, data, bytes, request);
  waitOne(t, request);
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void expectAllOk(const std::vector<std::exception_ptr>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (errors[rank])
      ADD_FAILURE() << "rank " << rank << " failed: " << describe(errors[rank]);
  }
}

// Checks that `error` is an E; returns it (or null, after adding a failure).
template <typename E>
const E* expectError(const std::exception_ptr& error, int rank) {
  if (!error) {
    ADD_FAILURE() << "rank " << rank << " did not fail";
    return nullptr;
  }
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return &e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " failed with the wrong type: " << e.what();
  }
  return nullptr;
}

template <typename E>
void expectErrorMentions(const std::exception_ptr& error, int rank, const std::string& text) {
  try {
    if (expectError<E>(error, rank) != nullptr)
      std::rethrow_exception(error);
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
        << "rank " << rank << ": '" << e.what() << "' does not mention '" << text << "'";
  }
}

class Conformance : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { group_ = makeGroup(GetParam().kind, GetParam().size); }
  int size() const { return GetParam().size; }
  // Tests of messages buffered ahead of their receive need sends that complete before it.
  bool sendsCompleteEarly() const { return GetParam().kind != "loopback_rendezvous"; }

  Group group_;
};

TEST_P(Conformance, PingPong) {
  auto errors = runRanks(group_, [&](Transport& t) {
    const int rank = t.rank();
    EXPECT_EQ(t.size(), size());
    EXPECT_EQ(t.name(), GetParam().kind.substr(0, GetParam().kind.find('_')));
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
  expectAllOk(errors);
}

// Each rank sends kMessages messages of varying sizes to its right neighbour with one tag; the
// receiver posts them in batches (some arrive before their receive, some after) and checks order.
TEST_P(Conformance, FifoOrderOnOneTag) {
  if (!sendsCompleteEarly())
    GTEST_SKIP() << "sends complete only when matched";
  constexpr int kMessages = 200;
  auto length = [](int i) { return static_cast<size_t>((i * 37) % 300); };  // 0..299 int32s
  auto errors = runRanks(group_, [&](Transport& t) {
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
  expectAllOk(errors);
}

// Sends go out with tags 0..9; receives are posted in the reverse order of tags.
TEST_P(Conformance, TagsMatchIndependently) {
  constexpr int kTags = 10;
  auto errors = runRanks(group_, [&](Transport& t) {
    std::vector<uint64_t> out(kTags * size()), in(kTags * size(), 0);
    std::vector<Request> requests(2 * kTags * size());
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      for (int tag = 0; tag < kTags; ++tag) {
        int slot = peer * kTags + tag;
        out[slot] = (uint64_t(t.rank()) << 32) | (uint64_t(peer) << 16) | uint64_t(tag);
        t.postSend(peer, kCollectiveTag + tag, stamp(), &out[slot], 8, requests[2 * slot]);
        pointers.push_back(&requests[2 * slot]);
      }
      for (int tag = kTags - 1; tag >= 0; --tag) {
        int slot = peer * kTags + tag;
        t.postRecv(peer, kCollectiveTag + tag, stamp(), &in[slot], 8, requests[2 * slot + 1]);
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
  expectAllOk(errors);
}

TEST_P(Conformance, ZeroByteMessages) {
  auto errors = runRanks(group_, [&](Transport& t) {
    std::vector<Request> requests(2 * size());
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == t.rank())
        continue;
      t.postSend(peer, 0, stamp(), nullptr, 0, requests[2 * peer]);
      t.postRecv(peer, 0, stamp(), nullptr, 0, requests[2 * peer + 1]);
      pointers.push_back(&requests[2 * peer]);
      pointers.push_back(&requests[2 * peer + 1]);
    }
    t.wait(pointers, soon());
    for (Request* request : pointers) EXPECT_TRUE(request->done);
  });
  expectAllOk(errors);
}

// Ranks 0 and 1 send each other 64 MiB at once: neither may wait for the other to read first.
TEST_P(Conformance, LargeMessagesBothWays) {
  if (size() == 3 || size() == 4)
    GTEST_SKIP() << "only ranks 0 and 1 take part; sizes 2, 8 suffice";
  constexpr size_t kCount = (64 << 20) / sizeof(uint32_t);
  auto errors = runRanks(group_, [&](Transport& t) {
    if (t.rank() > 1)
      return;
    const int peer = 1 - t.rank();
    std::vector<uint32_t> out(kCount), in(kCount, 0);
    for (size_t i = 0; i < kCount; ++i) out[i] = static_cast<uint32_t>(i * 2654435761u) ^ t.rank();
    Request sendRequest, recvRequest;
    t.postSend(peer, 1, stamp(1, kCount), out.data(), kCount * 4, sendRequest);
    t.postRecv(peer, 1, stamp(1, kCount), in.data(), kCount * 4, recvRequest);
    Request* both[] = {&sendRequest, &recvRequest};
    t.wait(both, Deadline::after(seconds(30)));
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(in[i], static_cast<uint32_t>(i * 2654435761u) ^ uint32_t(peer)) << i;
    }
  });
  expectAllOk(errors);
}

// Rank 1 sends a small and a large message on tag 1, then one on tag 2; rank 0 waits for tag 2
// first, so both tag-1 messages must be buffered, then delivered in order. Rank 1 signals once
// its sends are posted, not done: a transport with bounded buffers (shm: a 1 MiB ring) completes
// a 3 MiB send only while the receiver drains it, which the contract allows.
TEST_P(Conformance, MessagesBeforeTheirReceive) {
  if (!sendsCompleteEarly())
    GTEST_SKIP() << "sends complete only when matched";
  constexpr size_t kLarge = 3 << 20;
  Signal sent;
  auto errors = runRanks(group_, [&](Transport& t) {
    if (t.rank() == 1) {
      std::vector<uint8_t> small(100, 11), large(kLarge, 22);
      uint8_t last = 33;
      Request requests[3];
      t.postSend(0, 1, stamp(), small.data(), small.size(), requests[0]);
      t.postSend(0, 1, stamp(), large.data(), large.size(), requests[1]);
      t.postSend(0, 2, stamp(), &last, 1, requests[2]);
      sent.set();
      Request* all[] = {&requests[0], &requests[1], &requests[2]};
      t.wait(all, soon());
    } else if (t.rank() == 0) {
      sent.wait();
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
  expectAllOk(errors);
}

TEST_P(Conformance, RequestsCanBeReused) {
  auto errors = runRanks(group_, [&](Transport& t) {
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
  expectAllOk(errors);
}

TEST_P(Conformance, InvalidArgumentsChangeNothing) {
  auto errors = runRanks(group_, [&](Transport& t) {
    int value = 0;
    Request request;
    EXPECT_THROW(t.postSend(t.rank(), 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postSend(size(), 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postRecv(-1, 0, stamp(), &value, 4, request), InvalidArgumentError);
    Request never;
    Request* list[] = {&never};
    EXPECT_THROW(t.wait(list, soon()), InvalidArgumentError);
    EXPECT_EQ(t.failure(), nullptr);
    // Still healthy: a ping with the next rank works.
    const int right = (t.rank() + 1) % size(), left = (t.rank() + size() - 1) % size();
    int in = -1, out = t.rank();
    Request requests[2];
    t.postSend(right, 0, stamp(), &out, 4, requests[0]);
    t.postRecv(left, 0, stamp(), &in, 4, requests[1]);
    Request* both[] = {&requests[0], &requests[1]};
    t.wait(both, soon());
    EXPECT_EQ(in, left);
  });
  expectAllOk(errors);
}

// Everyone but the rank that notices waits on a receive that never comes; all must fail promptly
// with MismatchError, and later calls throw it again.
void checkMismatchReachesEveryone(Group& group,
                                  int size,
                                  const Fingerprint& sent,
                                  size_t sentBytes,
                                  const std::string& field,
                                  const std::string& detail) {
  auto start = Clock::now();
  auto errors = runRanks(group, [&](Transport& t) {
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
  if (const auto* error = expectError<MismatchError>(errors[0], 0)) {
    EXPECT_EQ(error->field(), field);
    EXPECT_EQ(error->ranks(), (std::vector<int>{0, 1}));
    EXPECT_NE(std::string(error->what()).find(detail), std::string::npos) << error->what();
    EXPECT_NE(std::string(error->what()).find("rank 0 (this process)"), std::string::npos);
  }
  for (int rank = 1; rank < size; ++rank) {
    expectErrorMentions<MismatchError>(errors[rank], rank, "aborted because rank 0 reported");
  }
  // Failure is final: every later call throws the same error type.
  for (int rank = 0; rank < size; ++rank) {
    Request request;
    int value = 0;
    EXPECT_THROW(group[rank]->postSend((rank + 1) % size, 0, stamp(), &value, 4, request),
                 MismatchError);
    EXPECT_NE(group[rank]->failure(), nullptr);
  }
}

TEST_P(Conformance, FingerprintMismatchFailsEveryRank) {
  checkMismatchReachesEveryone(group_, size(), stamp(7, 7), 32, "count",
                               "count is 8 here but 7 on rank 1");
}

TEST_P(Conformance, ByteCountMismatchFailsEveryRank) {
  checkMismatchReachesEveryone(group_, size(), stamp(7, 8), 40, "bytes",
                               "expected a message of 32 bytes from rank 1 but rank 1 sent 40");
}

TEST_P(Conformance, TimeoutNamesTheSilentPeer) {
  Signal done;
  auto start = Clock::now();
  auto errors = runRanks(group_, [&](Transport& t) {
    int value = 0;
    Request request;
    if (t.rank() == 0) {
      t.postRecv(size() - 1, 0, stamp(), &value, 4, request);
      waitOne(t, request, Deadline::after(milliseconds(300)));
    } else if (t.rank() == 1) {
      t.postRecv(0, 0, stamp(), &value, 4, request);  // rank 0 times out, then tells rank 1
      waitOne(t, request, Deadline::after(seconds(10)));
    }
  });
  EXPECT_LT(Clock::now() - start, seconds(3));
  if (const auto* error = expectError<TimeoutError>(errors[0], 0)) {
    EXPECT_EQ(error->missingRanks(), std::vector<int>{size() - 1});
    std::string expected = "waiting for rank " + std::to_string(size() - 1) + ";";
    EXPECT_NE(std::string(error->what()).find(expected), std::string::npos) << error->what();
  }
  expectErrorMentions<TimeoutError>(errors[1], 1, "aborted because rank 0 reported");
}

TEST_P(Conformance, AbortFromAnotherThreadWakesTheWaiter) {
  auto start = Clock::now();
  Signal waiting;
  std::thread aborter([&] {
    try {
      waiting.wait();
    } catch (...) {
    }
    std::this_thread::sleep_for(milliseconds(100));  // most likely inside wait() by now
    group_[0]->abort(std::make_exception_ptr(UnsupportedError("stop right there")));
  });
  auto errors = runRanks(group_, [&](Transport& t) {
    int value = 0;
    Request request;
    t.postRecv((t.rank() + 1) % size(), 0, stamp(), &value, 4, request);
    if (t.rank() == 0)
      waiting.set();
    waitOne(t, request, Deadline::after(seconds(10)));
  });
  aborter.join();
  EXPECT_LT(Clock::now() - start, seconds(3));
  expectErrorMentions<UnsupportedError>(errors[0], 0, "stop right there");
  for (int rank = 1; rank < size(); ++rank) {
    expectErrorMentions<UnsupportedError>(errors[rank], rank,
                                          "aborted because rank 0 reported: stop right there");
  }
}

// The last rank sends one message and closes. Rank 0 still gets that message, and messages from
// other ranks, but a further receive from the closed rank fails with PeerError naming it.
TEST_P(Conformance, GoodbyeOnlyFailsRequestsOnThatPeer) {
  if (!sendsCompleteEarly())
    GTEST_SKIP() << "sends complete only when matched";
  const int leaver = size() - 1;
  Signal closed;
  auto errors = runRanks(group_, [&](Transport& t) {
    int value = 0;
    if (t.rank() == leaver) {
      value = 77;
      send(t, 0, 4, &value, 4, stamp());
      t.close();
      t.close();  // idempotent
      closed.set();
      return;
    }
    if (t.rank() != 0) {
      closed.wait();
      value = 100 + t.rank();
      send(t, 0, 4, &value, 4, stamp());
      return;
    }
    closed.wait();
    for (int peer = 1; peer < leaver; ++peer) {
      recv(t, peer, 4, &value, 4, stamp());
      EXPECT_EQ(value, 100 + peer);
    }
    recv(t, leaver, 4, &value, 4, stamp());
    EXPECT_EQ(value, 77);
    recv(t, leaver, 4, &value, 4, stamp());  // throws
  });
  EXPECT_EQ(errors[leaver], nullptr) << describe(errors[leaver]);
  for (int rank = 1; rank < leaver; ++rank) {
    // Their send is done, but rank 0's failure may reach them before their wait() returns.
    if (errors[rank]) {
      expectErrorMentions<PeerError>(errors[rank], rank, "aborted because rank 0 reported");
    }
  }
  if (const auto* error = expectError<PeerError>(errors[0], 0)) {
    EXPECT_EQ(error->peerRank(), leaver);
    std::string expected = "rank " + std::to_string(leaver) + " has closed its communicator";
    EXPECT_NE(std::string(error->what()).find(expected), std::string::npos) << error->what();
  }
  EXPECT_NE(group_[leaver]->failure(), nullptr);  // calls after close throw
}

// The last rank vanishes without goodbye while the others wait on each other (not on it): all must
// fail with PeerError naming it, within about a second.
TEST_P(Conformance, CrashIsNoticedByEveryRank) {
  const int dead = size() - 1;
  auto start = Clock::now();
  auto errors = runRanks(group_, [&](Transport& t) {
    if (t.rank() == dead) {
      std::this_thread::sleep_for(milliseconds(50));  // let the others start waiting
      crash(t);
      return;
    }
    int value = 0;
    Request request;
    int peer = size() == 2 ? dead : (t.rank() + 1) % dead;
    t.postRecv(peer, 0, stamp(), &value, 4, request);
    waitOne(t, request, Deadline::after(seconds(10)));
  });
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  for (int rank = 0; rank < dead; ++rank) {
    if (const auto* error = expectError<PeerError>(errors[rank], rank)) {
      EXPECT_EQ(error->peerRank(), dead) << error->what();
      std::string expected = "rank " + std::to_string(dead) + " closed its connection unexpectedly";
      EXPECT_NE(std::string(error->what()).find(expected), std::string::npos) << error->what();
    }
  }
}

// Destroying a transport closes it: the peer gets what was sent, then PeerError on further
// receives.
TEST_P(Conformance, DestroyingSaysGoodbye) {
  if (!sendsCompleteEarly())
    GTEST_SKIP() << "sends complete only when matched";
  Signal gone;
  auto errors = runRanks(group_, [&](Transport& t) {
    if (t.rank() == 1) {
      int value = 5;
      send(t, 0, 0, &value, 4, stamp());
      group_[1].reset();  // destructor: goodbye
      gone.set();
      return;
    }
    if (t.rank() != 0)
      return;
    gone.wait();
    int value = 0;
    recv(t, 1, 0, &value, 4, stamp());
    EXPECT_EQ(value, 5);
    recv(t, 1, 0, &value, 4, stamp());
  });
  if (const auto* error = expectError<PeerError>(errors[0], 0)) {
    EXPECT_EQ(error->peerRank(), 1);
    EXPECT_NE(std::string(error->what()).find("has closed its communicator"), std::string::npos);
  }
}

// The rendezvous loopback (what the algorithm tests run on): a send whose receive is never posted
// does not complete; its wait times out naming the receiver.
TEST_P(Conformance, RendezvousSendWaitsForItsReceive) {
  if (sendsCompleteEarly())
    GTEST_SKIP() << "sends may complete before their receive";
  auto errors = runRanks(group_, [&](Transport& t) {
    if (t.rank() != 1)
      return;
    int value = 1;
    Request request;
    t.postSend(0, 0, stamp(), &value, sizeof(value), request);
    waitOne(t, request, Deadline::after(milliseconds(100)));
  });
  if (const auto* error = expectError<TimeoutError>(errors[1], 1)) {
    EXPECT_EQ(error->missingRanks(), std::vector<int>{0});
  }
}

std::vector<Param> allParams() {
  std::vector<Param> params;
  for (const char* kind : {"loopback", "loopback_rendezvous", "tcp", "shm"}) {
    for (int size : {2, 3, 4, 8}) params.push_back({kind, size});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(AllTransports, Conformance, ::testing::ValuesIn(allParams()), paramName);

}  // namespace
}  // namespace chorus::transport::testing
