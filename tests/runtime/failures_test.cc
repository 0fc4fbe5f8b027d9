// What happens when ranks misbehave: inconsistent calls (MismatchError on every rank), a rank that
// never calls (TimeoutError naming it), a rank that dies (PeerError naming it, within seconds), and
// bad input (InvalidArgumentError before anything is sent).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <future>
#include <vector>

#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::RankOptions;
using chorus::testing::runRanks;

bool mentions(const std::exception& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

TEST(MismatchTest, CountMismatchRaisesOnEveryRank) {
  for (int p : {2, 3, 4}) {
    runRanks(p, [&](Communicator& comm) {
      std::vector<float> values(comm.rank() == 1 ? 8 : 7, 1.0f);
      try {
        comm.allreduce(Tensor(values.data(), {static_cast<int64_t>(values.size())}))->wait();
        ADD_FAILURE() << "rank " << comm.rank() << " returned from a mismatched allreduce";
      } catch (const MismatchError& e) {
        EXPECT_TRUE(mentions(e, "count")) << e.what();
      }
    });
  }
}

TEST(MismatchTest, ReduceOpMismatchRaisesOnEveryRank) {
  runRanks(3, [&](Communicator& comm) {
    std::vector<int32_t> values(4, 1);
    auto op = comm.rank() == 2 ? ReduceOp::kMax : ReduceOp::kSum;
    EXPECT_THROW(comm.allreduce(Tensor(values.data(), {4}), op)->wait(), MismatchError);
  });
}

TEST(MismatchTest, DifferentCollectivesRaiseOnEveryRank) {
  runRanks(3, [&](Communicator& comm) {
    std::vector<float> values(16, 1.0f);
    Tensor tensor(values.data(), {16});
    auto work = comm.rank() == 0 ? comm.broadcast(tensor, 1) : comm.allreduce(tensor);
    EXPECT_THROW(work->wait(), MismatchError);
    // The communicator is aborted: later operations fail at once instead of running out of step.
    EXPECT_THROW(comm.barrier()->wait(), MismatchError);
  });
}

TEST(MismatchTest, DifferentAlgorithmChoicesRaiseOnEveryRank) {
  // Ranks are processes here, each with its own environment: rank 0 forces the ring, the others
  // choose recursive doubling for this small vector. (Algorithm rows belong to the algorithmic
  // backends; the shm backend's native allreduce has none.)
  RankOptions options;
  options.backend = "tcp";
  auto statuses = chorus::testing::forkRanks(
      3,
      [&](Communicator& comm) {
        if (comm.rank() == 0)
          setenv("CHORUS_ALLREDUCE_ALGO", "ring", 1);
        std::vector<float> values(8, 1.0f);
        try {
          comm.allreduce(Tensor(values.data(), {8}))->wait();
          ADD_FAILURE() << "rank " << comm.rank() << " returned from a mismatched allreduce";
        } catch (const MismatchError& e) {
          EXPECT_TRUE(mentions(e, "CHORUS_<COLLECTIVE>_ALGO")) << e.what();
        }
      },
      options);
  chorus::testing::expectAllSucceeded(statuses);
}

TEST(TimeoutTest, MissingRankIsNamedAfterTheTimeout) {
  RankOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  // Rank 1 stays alive but never calls the collective; it leaves once rank 0 has timed out.
  testing::runWithRankOneSilent(
      [](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        auto start = std::chrono::steady_clock::now();
        try {
          comm.allreduce(Tensor(values.data(), {4}))->wait();
          ADD_FAILURE() << "allreduce returned without rank 1";
        } catch (const TimeoutError& e) {
          EXPECT_EQ(e.missingRanks(), std::vector<int>{1}) << e.what();
          EXPECT_TRUE(mentions(e, "waiting for rank 1;")) << e.what();
        }
        auto waited = std::chrono::steady_clock::now() - start;
        EXPECT_GE(waited, std::chrono::milliseconds(1400));
        EXPECT_LT(waited, std::chrono::seconds(10));
      },
      options);
}

// Note [A receive for another tag]: a recv whose sender used another tag times out saying so.
class TagMismatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TagMismatchTest, ARecvTimesOutNamingTheTagItsPeerSent) {
  RankOptions options;
  options.backend = GetParam();
  options.timeout = std::chrono::milliseconds(1000);
  // Rank 0 stays until rank 1 has checked (ranks are threads: a promise orders them).
  std::promise<void> checked;
  std::shared_future<void> done = checked.get_future().share();
  runRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        if (comm.rank() == 0) {
          comm.send(Tensor(values.data(), {4}), 1, /*tag=*/7)->wait();  // completes: eager
          done.wait_for(std::chrono::seconds(30));
          return;
        }
        struct Release {
          std::promise<void>& promise;
          ~Release() { promise.set_value(); }
        } release{checked};
        try {
          comm.recv(Tensor(values.data(), {4}), 0, /*tag=*/8)->wait();
          ADD_FAILURE() << "the recv returned";
        } catch (const TimeoutError& e) {
          EXPECT_EQ(e.missingRanks(), std::vector<int>{0}) << e.what();
          EXPECT_TRUE(mentions(e,
                               "rank 0 did send a message with tag 7, which waits unreceived, "
                               "while this rank receives tag 8 from it"))
              << e.what();
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         TagMismatchTest,
                         ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

TEST(TimeoutTest, WorkWaitWithTimeoutLeavesOperationRunning) {
  // Rank 1 joins the allreduce only after rank 0's short wait has timed out (ranks are threads
  // here, so a promise orders them without sleeping).
  std::promise<void> rankZeroTimedOut;
  auto released = rankZeroTimedOut.get_future().share();
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> values(4, 1.0f);
    if (comm.rank() == 0) {
      auto work = comm.allreduce(Tensor(values.data(), {4}));
      EXPECT_THROW(work->wait(std::chrono::milliseconds(50)), TimeoutError);
      EXPECT_FALSE(work->isCompleted());
      rankZeroTimedOut.set_value();
      work->wait();
    } else {
      released.wait();
      comm.allreduce(Tensor(values.data(), {4}))->wait();
    }
    EXPECT_EQ(values[0], 2.0f);
  });
}

TEST(PeerDeathTest, KilledRankIsNamedPromptlyOnEveryOtherRank) {
  RankOptions options;
  options.timeout = std::chrono::seconds(60);  // must fail long before this
  auto statuses = chorus::testing::forkRanks(
      3,
      [&](Communicator& comm) {
        std::vector<float> values(1024, 1.0f);
        comm.allreduce(Tensor(values.data(), {1024}))->wait();
        if (comm.rank() == 1)
          raise(SIGKILL);
        auto start = std::chrono::steady_clock::now();
        try {
          for (int i = 0; i < 100; ++i) comm.allreduce(Tensor(values.data(), {1024}))->wait();
          ADD_FAILURE() << "allreduce kept working without rank 1";
        } catch (const PeerError& e) {
          EXPECT_TRUE(mentions(e, "rank 1")) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
      },
      options);
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(WIFSIGNALED(statuses[1]) && WTERMSIG(statuses[1]) == SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0) << "rank " << r;
  }
}

TEST(ValidationTest, BadInputIsRefusedBeforeAnythingIsSent) {
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> floats(12, 1.0f);
    std::vector<int32_t> ints(12, 1);
    Tensor strided(floats.data(), DataType::kFloat32, {3, 2}, {1, 3});
    EXPECT_THROW(comm.allreduce(strided), InvalidArgumentError);
    EXPECT_THROW(comm.allreduce({Tensor(floats.data(), {12}), Tensor(ints.data(), {12})}),
                 InvalidArgumentError);
    EXPECT_THROW(comm.allreduce(Tensor(floats.data(), {12}), ReduceOp::kBxor),
                 InvalidArgumentError);
    EXPECT_THROW(comm.broadcast(Tensor(floats.data(), {12}), 2), InvalidArgumentError);
    EXPECT_THROW(comm.reduce(Tensor(floats.data(), {12}), -1), InvalidArgumentError);
    EXPECT_THROW(comm.reduceScatter(Tensor(floats.data(), {12}), Tensor(floats.data(), {5})),
                 InvalidArgumentError);
    EXPECT_THROW(comm.allgather(Tensor(floats.data(), {3}), Tensor(floats.data(), {5})),
                 InvalidArgumentError);
    EXPECT_THROW(comm.allgather(Tensor(floats.data(), {3}), Tensor(floats.data(), {6}), 1),
                 InvalidArgumentError);
    EXPECT_THROW(comm.allToAll(Tensor(floats.data(), {3}), Tensor(floats.data(), {3})),
                 InvalidArgumentError);
    EXPECT_THROW(comm.send(Tensor(floats.data(), {12}), comm.rank()), InvalidArgumentError);
    EXPECT_THROW(comm.recv(Tensor(floats.data(), {12}), 5), InvalidArgumentError);
    Tensor gpu(floats.data(), DataType::kFloat32, {12}, Device::cuda(0));
    EXPECT_THROW(comm.allreduce(gpu), UnsupportedError);
    // Nothing was sent, so the communicator still works.
    comm.allreduce(Tensor(floats.data(), {12}))->wait();
    EXPECT_EQ(floats[0], 2.0f);
  });
}

TEST(SingleRankTest, SizeOneIsTheIdentityAndOpensNoConnection) {
  runRanks(1, [&](Communicator& comm) {
    EXPECT_EQ(comm.backendName(), "void");
    std::vector<float> values = {1, 2, 3};
    comm.allreduce(Tensor(values.data(), {3}), ReduceOp::kAvg)->wait();
    EXPECT_EQ(values, (std::vector<float>{1, 2, 3}));
    comm.barrier()->wait();
  });
}

}  // namespace
}  // namespace chorus
