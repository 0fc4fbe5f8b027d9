// The transport conformance suite for the MPI transport, run as one process per rank under mpirun
// (registered for 2 and 4 ranks). Each test makes a transport over MPI_COMM_WORLD on every rank,
// runs the rank's part, checks its own results, and meets the others at an MPI_Barrier before the
// transport closes (so a goodbye never overtakes a test's last message). Every wait has a
// deadline, and ctest kills the job after 120 s, so a broken transport fails instead of hanging.
// Expected values are closed forms of rank, peer and index. gtest prints from rank 0; other ranks
// print only their failures, and each rank exits non-zero when one of its tests failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <thread>

#include "transport/mpi/transport.h"

namespace chorus::transport::mpi {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

int worldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int worldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

Fingerprint stamp(uint64_t sequence = 1, uint64_t count = 0) {
  Fingerprint fingerprint;
  fingerprint.sequence = sequence;
  fingerprint.count = count;
  fingerprint.collective = Collective::kAllreduce;
  fingerprint.reduceOp = static_cast<uint8_t>(ReduceOp::kSum);
  fingerprint.dataType = static_cast<uint8_t>(DataType::kFloat32);
  return fingerprint;
}

Deadline soon() { return Deadline::after(seconds(10)); }

void waitOne(Transport& t, Request& request, Deadline deadline = soon()) {
  Request* requests[] = {&request};
  t.wait(requests, deadline);
}

void send(Transport& t, int peer, uint64_t tag, const void* data, size_t bytes) {
  Request request;
  t.postSend(peer, tag, stamp(), data, bytes, request);
  waitOne(t, request);
}

void recv(Transport& t, int peer, uint64_t tag, void* data, size_t bytes) {
  Request request;
  t.postRecv(peer, tag, stamp(), data, bytes, request);
  waitOne(t, request);
}

// Runs this rank's part on a fresh transport; returns what it threw (null: nothing). The
// transport outlives the closing barrier unless `keep` is given and the body closes it itself.
std::exception_ptr runRank(const std::function<void(Transport&)>& body,
                           std::unique_ptr<Transport>* keep = nullptr) {
  auto transport = createMpiTransport(MPI_COMM_WORLD);
  std::exception_ptr error;
  try {
    body(*transport);
  } catch (...) {
    error = std::current_exception();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (keep)
    *keep = std::move(transport);
  return error;
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void expectOk(const std::exception_ptr& error) {
  if (error)
    ADD_FAILURE() << "rank " << worldRank() << " failed: " << describe(error);
}

// Checks that `error` is an E whose message contains `text`.
template <typename E>
void expectError(const std::exception_ptr& error, const std::string& text) {
  if (!error) {
    ADD_FAILURE() << "rank " << worldRank() << " did not fail";
    return;
  }
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << worldRank() << " failed with the wrong type: " << e.what();
  }
}

TEST(MpiTransport, PingPong) {
  const int size = worldSize();
  expectOk(runRank([&](Transport& t) {
    EXPECT_EQ(t.size(), size);
    EXPECT_EQ(t.rank(), worldRank());
    EXPECT_EQ(t.name(), "mpi");
    if (t.rank() == 0) {
      for (int peer = 1; peer < size; ++peer) {
        int64_t value = 1000 + peer, reply = 0;
        send(t, peer, 7, &value, sizeof(value));
        recv(t, peer, 7, &reply, sizeof(reply));
        EXPECT_EQ(reply, 2 * (1000 + peer) + peer);
      }
    } else {
      int64_t value = 0;
      recv(t, 0, 7, &value, sizeof(value));
      EXPECT_EQ(value, 1000 + t.rank());
      value = 2 * value + t.rank();
      send(t, 0, 7, &value, sizeof(value));
    }
  }));
}

// kMessages messages of sizes on both sides of the inline limit go to the right neighbour on one
// tag; all receives are posted before any wait, then waited in batches.
TEST(MpiTransport, FifoOrderOnOneTag) {
  constexpr int kMessages = 120;
  auto length = [](int i) { return static_cast<size_t>((i * 337) % 3000); };  // int32s
  const int size = worldSize();
  expectOk(runRank([&](Transport& t) {
    const int right = (t.rank() + 1) % size, left = (t.rank() + size - 1) % size;
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
  }));
}

// Sends go out with point-to-point tags 0..4 and collective tags kCollectiveTag + 0..4; receives
// are posted in the reverse order.
TEST(MpiTransport, TagsMatchIndependently) {
  constexpr int kTags = 10;
  auto chorusTag = [](int tag) { return tag < 5 ? uint64_t(tag) : kCollectiveTag + (tag - 5); };
  const int size = worldSize();
  expectOk(runRank([&](Transport& t) {
    std::vector<uint64_t> out(kTags * size), in(kTags * size, 0);
    std::vector<Request> requests(2 * kTags * size);
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size; ++peer) {
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
    for (int peer = 0; peer < size; ++peer) {
      for (int tag = 0; peer != t.rank() && tag < kTags; ++tag) {
        EXPECT_EQ(in[peer * kTags + tag],
                  (uint64_t(peer) << 32) | (uint64_t(t.rank()) << 16) | uint64_t(tag));
      }
    }
  }));
}

TEST(MpiTransport, ZeroByteMessages) {
  const int size = worldSize();
  expectOk(runRank([&](Transport& t) {
    std::vector<Request> requests(2 * size);
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == t.rank())
        continue;
      t.postSend(peer, kCollectiveTag, stamp(), nullptr, 0, requests[2 * peer]);
      t.postRecv(peer, kCollectiveTag, stamp(), nullptr, 0, requests[2 * peer + 1]);
      pointers.push_back(&requests[2 * peer]);
      pointers.push_back(&requests[2 * peer + 1]);
    }
    t.wait(pointers, soon());
    for (Request* request : pointers) EXPECT_TRUE(request->done);
  }));
}

// Every pair exchanges 16 MiB at once: nobody may wait for the other to read first.
TEST(MpiTransport, LargeMessagesBothWays) {
  constexpr size_t kCount = (16 << 20) / sizeof(uint32_t);
  auto value = [](size_t i, int from, int to) {
    return static_cast<uint32_t>(i * 2654435761u) ^ uint32_t(from * 16 + to);
  };
  const int size = worldSize();
  expectOk(runRank([&](Transport& t) {
    std::vector<std::vector<uint32_t>> out(size), in(size);
    std::vector<Request> requests(2 * size);
    std::vector<Request*> pointers;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == t.rank())
        continue;
      out[peer].resize(kCount);
      in[peer].assign(kCount, 0);
      for (size_t i = 0; i < kCount; ++i) out[peer][i] = value(i, t.rank(), peer);
      t.postSend(peer, kCollectiveTag, stamp(1, kCount), out[peer].data(), kCount * 4,
                 requests[2 * peer]);
      t.postRecv(peer, kCollectiveTag, stamp(1, kCount), in[peer].data(), kCount * 4,
                 requests[2 * peer + 1]);
      pointers.push_back(&requests[2 * peer]);
      pointers.push_back(&requests[2 * peer + 1]);
    }
    t.wait(pointers, Deadline::after(seconds(30)));
    for (int peer = 0; peer < size; ++peer) {
      for (size_t i = 0; peer != t.rank() && i < kCount; ++i) {
        ASSERT_EQ(in[peer][i], value(i, peer, t.rank())) << peer << " " << i;
      }
    }
  }));
}

// Rank 1 posts a small and a large message on tag 1, then one on tag 2, before rank 0 posts any
// receive (a barrier between); rank 0 takes tag 2 first, then both tag-1 messages in order.
TEST(MpiTransport, MessagesBeforeTheirReceive) {
  constexpr size_t kLarge = 3 << 20;
  expectOk(runRank([&](Transport& t) {
    if (t.rank() == 1) {
      std::vector<uint8_t> small(100, 11), large(kLarge, 22);
      uint8_t last = 33;
      Request requests[3];
      t.postSend(0, 1, stamp(), small.data(), small.size(), requests[0]);
      t.postSend(0, 1, stamp(), large.data(), large.size(), requests[1]);
      t.postSend(0, 2, stamp(), &last, 1, requests[2]);
      MPI_Barrier(MPI_COMM_WORLD);
      Request* all[] = {&requests[0], &requests[1], &requests[2]};
      t.wait(all, soon());
      return;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (t.rank() == 0) {
      uint8_t last = 0;
      recv(t, 1, 2, &last, 1);
      EXPECT_EQ(last, 33);
      std::vector<uint8_t> small(100, 0), large(kLarge, 0);
      recv(t, 1, 1, small.data(), small.size());
      recv(t, 1, 1, large.data(), large.size());
      EXPECT_EQ(small, std::vector<uint8_t>(100, 11));
      EXPECT_EQ(large, std::vector<uint8_t>(kLarge, 22));
    }
  }));
}

TEST(MpiTransport, InvalidArgumentsChangeNothing) {
  const int size = worldSize();
  int* tagUb = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
  ASSERT_TRUE(flag && tagUb);
  expectOk(runRank([&](Transport& t) {
    int value = 0;
    Request request;
    const int right = (t.rank() + 1) % size, left = (t.rank() + size - 1) % size;
    EXPECT_THROW(t.postSend(t.rank(), 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postSend(size, 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postRecv(-1, 0, stamp(), &value, 4, request), InvalidArgumentError);
    EXPECT_THROW(t.postSend(right, uint64_t(*tagUb) - 1024, stamp(), &value, 4, request),
                 InvalidArgumentError);
    EXPECT_THROW(t.postSend(right, kCollectiveTag + 1024, stamp(), &value, 4, request),
                 InvalidArgumentError);
    Request never;
    Request* list[] = {&never};
    EXPECT_THROW(t.wait(list, soon()), InvalidArgumentError);
    EXPECT_EQ(t.failure(), nullptr);
    // Still healthy, and the largest allowed tag (MPI_TAG_UB - 1025) works.
    int in = -1, out = t.rank();
    Request requests[2];
    t.postSend(right, uint64_t(*tagUb) - 1025, stamp(), &out, 4, requests[0]);
    t.postRecv(left, uint64_t(*tagUb) - 1025, stamp(), &in, 4, requests[1]);
    Request* both[] = {&requests[0], &requests[1]};
    t.wait(both, soon());
    EXPECT_EQ(in, left);
  }));
}

// Rank 1 sends rank 0 a message stamped `sent` of `sentBytes`; rank 0 expects stamp(7, 8) and 32
// bytes. Everyone else waits on a receive that never comes; all fail promptly with MismatchError.
void checkMismatchReachesEveryone(const Fingerprint& sent,
                                  size_t sentBytes,
                                  const std::string& field,
                                  const std::string& detail) {
  const int size = worldSize();
  auto start = Clock::now();
  std::unique_ptr<Transport> kept;
  auto error = runRank(
      [&](Transport& t) {
        std::vector<uint8_t> buffer(64, 0);
        Request request;
        if (t.rank() == 1)
          t.postSend(0, 5, sent, buffer.data(), sentBytes, request);
        Request receive;
        if (t.rank() == 0)
          t.postRecv(1, 5, stamp(7, 8), buffer.data(), 32, receive);
        else
          t.postRecv((t.rank() + 1) % size, 9, stamp(), buffer.data(), 1, receive);
        waitOne(t, receive);
      },
      &kept);
  EXPECT_LT(Clock::now() - start, seconds(5)) << "the mismatch was not spread promptly";
  if (worldRank() == 0) {
    expectError<MismatchError>(error, detail);
    try {
      std::rethrow_exception(error);
    } catch (const MismatchError& e) {
      EXPECT_EQ(e.field(), field);
      EXPECT_EQ(e.ranks(), (std::vector<int>{0, 1}));
      EXPECT_NE(std::string(e.what()).find("rank 0 (this process)"), std::string::npos);
    } catch (...) {
    }
  } else {
    expectError<MismatchError>(error, "aborted because rank 0 reported");
  }
  // Failure is final: later calls throw the same error type.
  Request request;
  int value = 0;
  EXPECT_THROW(kept->postSend((worldRank() + 1) % size, 0, stamp(), &value, 4, request),
               MismatchError);
  EXPECT_NE(kept->failure(), nullptr);
}

TEST(MpiTransport, FingerprintMismatchFailsEveryRank) {
  checkMismatchReachesEveryone(stamp(7, 7), 32, "count", "count is 8 here but 7 on rank 1");
}

TEST(MpiTransport, ByteCountMismatchFailsEveryRank) {
  checkMismatchReachesEveryone(stamp(7, 8), 40, "bytes",
                               "expected a message of 32 bytes from rank 1 but rank 1 sent 40");
}

// Rank 0 waits 300 ms on the last rank, which says nothing; rank 1 waits on rank 0, which tells it.
TEST(MpiTransport, TimeoutNamesTheSilentPeer) {
  const int size = worldSize();
  auto start = Clock::now();
  auto error = runRank([&](Transport& t) {
    int value = 0;
    Request request;
    if (t.rank() == 0) {
      t.postRecv(size - 1, 0, stamp(), &value, 4, request);
      waitOne(t, request, Deadline::after(milliseconds(300)));
    } else if (t.rank() == 1) {
      t.postRecv(0, 0, stamp(), &value, 4, request);
      waitOne(t, request);
    }
  });
  EXPECT_LT(Clock::now() - start, seconds(5));
  if (worldRank() == 0) {
    expectError<TimeoutError>(error, "waiting for rank " + std::to_string(size - 1) + ";");
    try {
      std::rethrow_exception(error);
    } catch (const TimeoutError& e) {
      EXPECT_EQ(e.missingRanks(), std::vector<int>{size - 1});
    } catch (...) {
    }
  } else if (worldRank() == 1) {
    expectError<TimeoutError>(error, "aborted because rank 0 reported");
  } else {
    expectOk(error);
  }
}

// Rank 0's second thread aborts while its main thread waits; every rank fails with the same type.
TEST(MpiTransport, AbortFromAnotherThreadPropagates) {
  const int size = worldSize();
  auto start = Clock::now();
  std::unique_ptr<Transport> kept;
  auto error = runRank(
      [&](Transport& t) {
        std::thread aborter;
        if (t.rank() == 0) {
          aborter = std::thread([&t] {
            std::this_thread::sleep_for(milliseconds(100));  // most likely inside wait() by now
            t.abort(std::make_exception_ptr(UnsupportedError("stop right there")));
          });
        }
        int value = 0;
        Request request;
        t.postRecv((t.rank() + 1) % size, 0, stamp(), &value, 4, request);
        try {
          waitOne(t, request);
        } catch (...) {
          if (aborter.joinable())
            aborter.join();
          throw;
        }
      },
      &kept);
  EXPECT_LT(Clock::now() - start, seconds(5));
  if (worldRank() == 0)
    expectError<UnsupportedError>(error, "stop right there");
  else
    expectError<UnsupportedError>(error, "aborted because rank 0 reported: stop right there");
  Request request;
  int value = 0;
  EXPECT_THROW(kept->postRecv((worldRank() + 1) % size, 0, stamp(), &value, 4, request),
               UnsupportedError);
}

// The last rank sends rank 0 one message and closes. Rank 0 still gets it, and messages from the
// other ranks, but a further receive from the closed rank fails with PeerError naming it.
TEST(MpiTransport, GoodbyeOnlyFailsRequestsOnThatPeer) {
  const int size = worldSize();
  const int leaver = size - 1;
  auto transport = createMpiTransport(MPI_COMM_WORLD);
  std::exception_ptr error;
  try {
    int value = worldRank() * 10;
    if (worldRank() == leaver) {
      send(*transport, 0, 4, &value, 4);
      transport->close();
      MPI_Barrier(MPI_COMM_WORLD);
    } else if (worldRank() == 0) {
      MPI_Barrier(MPI_COMM_WORLD);  // the leaver has closed
      for (int peer = 1; peer < size; ++peer) {
        recv(*transport, peer, 4, &value, 4);
        EXPECT_EQ(value, peer * 10);
      }
      Request request;
      transport->postRecv(leaver, 4, stamp(), &value, 4, request);
      EXPECT_THROW(
          {
            try {
              waitOne(*transport, request, Deadline::after(seconds(5)));
            } catch (const PeerError& e) {
              EXPECT_EQ(e.peerRank(), leaver);
              EXPECT_NE(std::string(e.what()).find("closed its communicator"), std::string::npos);
              throw;
            }
          },
          PeerError);
    } else {
      send(*transport, 0, 4, &value, 4);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  } catch (...) {
    error = std::current_exception();
  }
  expectOk(error);
  MPI_Barrier(MPI_COMM_WORLD);
}

// Transports made one after another, each closed with messages (and goodbyes) still in flight,
// must not disturb the next one's message order. See Note [Retiring an MPI communicator].
TEST(MpiTransport, LeftoverMessagesDoNotReachTheNextTransport) {
  const int size = worldSize();
  for (int round = 0; round < 20; ++round) {
    expectOk(runRank([&](Transport& t) {
      const int right = (t.rank() + 1) % size, left = (t.rank() + size - 1) % size;
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
      MPI_Barrier(MPI_COMM_WORLD);  // nobody is waiting any more: the abort fails no one
      t.abort(std::make_exception_ptr(Error("end of round")));  // forgets the stray sends
    }));
  }
}

// Rank 0 makes a transport on its own: it times out; the others join later, once it has given up.
TEST(MpiTransport, CreationTimesOut) {
  MPI_Comm scratch;
  MPI_Comm_dup(MPI_COMM_WORLD, &scratch);
  if (worldRank() == 0) {
    auto start = Clock::now();
    EXPECT_THROW(createMpiTransport(scratch, Deadline::after(milliseconds(300))), TimeoutError);
    EXPECT_LT(Clock::now() - start, seconds(3));
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 has timed out
    // Completes with rank 0's abandoned duplication (which rank 0's MPI calls progress).
    auto transport = createMpiTransport(scratch, soon());
    EXPECT_EQ(transport->size(), worldSize());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&scratch);
}

// Prints only failures, prefixed with the rank (for ranks other than 0).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, result.file_name(), result.line_number(),
                   result.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace chorus::transport::mpi

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided < MPI_THREAD_MULTIPLE && rank == 0)
    std::fprintf(stderr, "warning: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n",
                 provided);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new chorus::transport::mpi::FailurePrinter(rank));
  }
  int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
