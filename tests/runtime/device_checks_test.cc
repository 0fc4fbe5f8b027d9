// The runtime's guards around collectives on CUDA tensors, without a GPU: a fake device backend
// (fake_device_backend.h) stands in for NCCL, and the ranks' host backends are real (TCP between
// threads, or processes). What is checked is the runtime's part, the same for NCCL:
//  - the host check (Note [Device fingerprint check]): mismatched device calls are a MismatchError
//    on every rank; a rank that never calls is a TimeoutError naming it; a failed check aborts the
//    device backend, so device work that would hang (a mismatched NCCL kernel) ends at once;
//  - the watchdog (runtime/device_watchdog.h): device work that every rank called but that never
//    ends is a TimeoutError once the deadline passes, with nobody waiting on the host for it.
// The killed-rank path (the launcher's record) runs through chorusrun: device_watchdog_check.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "fake_device_backend.h"
#include "harness/run_ranks.h"
#include "runtime/device_watchdog.h"
#include "runtime/device_work.h"

namespace chorus {
namespace {

using testing::RankOptions;
using testing::runRanks;

bool mentions(const std::exception& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

// A "CUDA" tensor for the fake: host memory labelled cuda:0 (the fake never reads it).
Tensor onFakeGpu(std::vector<float>& values) {
  return Tensor(values.data(), DataType::kFloat32, {static_cast<int64_t>(values.size())},
                Device::cuda(0));
}

class DeviceChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::installFakeDeviceBackend();
    testing::setFakeDeviceHangs(false);
  }
  void TearDown() override {
    testing::setFakeDeviceHangs(false);
    testing::setFakeDeviceStopsLate(false);
    testing::setFakeDeviceConnectWaits(false);
    testing::setFakeDeviceEnqueueFailsOn(-1);
  }
};

TEST_F(DeviceChecks, MismatchedCallsAreAMismatchErrorOnEveryRank) {
  runRanks(3, [](Communicator& comm) {
    std::vector<float> values(comm.rank() == 1 ? 8 : 4, 1.0f);
    // The device call itself returns at once: its check runs on the worker thread.
    auto work = comm.allreduce(onFakeGpu(values));
    try {
      comm.barrier()->wait();  // a host call, queued after the check
      ADD_FAILURE() << "rank " << comm.rank() << ": a mismatched device allreduce went unnoticed";
    } catch (const MismatchError& e) {
      EXPECT_TRUE(mentions(e, "count")) << e.what();
    }
    EXPECT_THROW(work->wait(), MismatchError);
  });
}

TEST_F(DeviceChecks, DifferentDeviceCollectivesAreAMismatchErrorOnEveryRank) {
  runRanks(2, [](Communicator& comm) {
    std::vector<float> values(4, 1.0f);
    auto work =
        comm.rank() == 0 ? comm.broadcast(onFakeGpu(values), 0) : comm.allreduce(onFakeGpu(values));
    try {
      dynamic_cast<detail::DeviceWork&>(*work).synchronize(
          Deadline::after(std::chrono::seconds(20)));
      ADD_FAILURE() << "rank " << comm.rank() << ": broadcast against allreduce went unnoticed";
    } catch (const MismatchError& e) {
      EXPECT_TRUE(mentions(e, "collective")) << e.what();
    }
  });
}

TEST_F(DeviceChecks, AFailedCheckEndsDeviceWorkThatWouldHang) {
  // Like an NCCL kernel of a mismatched call, the fake's work never ends on its own; the failed
  // check aborts the device backend, so the host wait ends with the MismatchError, long before the
  // deadline (30 s).
  testing::setFakeDeviceHangs(true);
  runRanks(2, [](Communicator& comm) {
    std::vector<float> values(comm.rank() == 0 ? 4 : 5, 1.0f);
    auto work = comm.allreduce(onFakeGpu(values));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(dynamic_cast<detail::DeviceWork&>(*work).synchronize(
                     Deadline::after(std::chrono::seconds(20))),
                 MismatchError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  });
}

TEST_F(DeviceChecks, ARankThatNeverCallsIsNamedAfterTheTimeout) {
  RankOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  testing::runWithRankOneSilent(
      [](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        auto work = comm.allreduce(onFakeGpu(values));
        try {
          comm.barrier()->wait();
          ADD_FAILURE() << "rank 0's device allreduce passed its check without rank 1";
        } catch (const TimeoutError& e) {
          EXPECT_EQ(e.missingRanks(), std::vector<int>{1}) << e.what();
          EXPECT_TRUE(mentions(e, "allreduce")) << e.what();
        }
      },
      options);
}

// NCCL connects a rank's peers during its first collectives, and its enqueue waits there for a
// peer that never calls (seen on an H200, NCCL 2.28). The call must still end, after the timeout,
// with the host check's TimeoutError naming the absent rank, not NCCL's error naming nobody.
TEST_F(DeviceChecks, AnEnqueueWaitingForAnAbsentRankEndsNamingIt) {
  testing::setFakeDeviceConnectWaits(true);
  RankOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  testing::runWithRankOneSilent(
      [](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        try {
          comm.allreduce(onFakeGpu(values))->wait();
          ADD_FAILURE() << "rank 0's allreduce ended without rank 1";
        } catch (const TimeoutError& e) {
          EXPECT_EQ(e.missingRanks(), std::vector<int>{1}) << e.what();
        } catch (const Error& e) {
          ADD_FAILURE() << "not the check's TimeoutError: " << e.what();
        }
        // At the check's timeout, not at the enqueue's own (twice as long).
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(5500));
      },
      options);
}

// A reduction the device lacks is refused at the call, before its check is queued: here on rank
// 0 alone, so a refusal that numbered or queued anything would leave the ranks' next checks
// apart (a MismatchError, or a hang). The communicator works on.
TEST_F(DeviceChecks, AReductionTheDeviceLacksIsRefusedAndTheCommunicatorWorks) {
  runRanks(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      std::vector<int32_t> flags(4, 1);
      EXPECT_THROW(comm.allreduce(Tensor(flags.data(), DataType::kInt32, {4}, Device::cuda(0)),
                                  ReduceOp::kBxor),
                   UnsupportedError);
    }
    std::vector<float> values(4, 1.0f);
    auto work = comm.allreduce(onFakeGpu(values));
    dynamic_cast<detail::DeviceWork&>(*work).synchronize(Deadline::after(std::chrono::seconds(20)));
    comm.barrier()->wait();
  });
}

// An enqueue that fails on one rank alone, after its check was queued, fails the communicator:
// that rank raises NCCL's error, and its peer, whose check passed, hears of it at its next call
// (not at the timeout, and not because the rank left) instead of waiting for a collective that
// rank never launched.
TEST_F(DeviceChecks, AnEnqueueFailingOnOneRankFailsTheCommunicatorOnEveryRank) {
  RankOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  testing::setFakeDeviceEnqueueFailsOn(1);
  std::promise<void> rankZeroDone;
  auto done = rankZeroDone.get_future().share();
  runRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        auto work = comm.allreduce(onFakeGpu(values));
        if (comm.rank() == 1) {
          EXPECT_THROW(work->wait(), InvalidArgumentError);
          done.wait();  // alive until rank 0 has its error
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          comm.barrier()->wait();
          ADD_FAILURE() << "rank 0 went on as if rank 1 had run the allreduce";
        } catch (const Error& e) {
          EXPECT_TRUE(mentions(e, "invalid argument on this rank alone")) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
        rankZeroDone.set_value();
      },
      options);
}

TEST_F(DeviceChecks, TheWatchdogEndsDeviceWorkThatNeverFinishes) {
  // Every rank calls, the check passes, and the device never finishes (a hung GPU, NCCL unable to
  // reach a peer). Nobody waits on the host; the watchdog fails the communicator at the deadline.
  testing::setFakeDeviceHangs(true);
  RankOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  runRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        auto work = comm.allreduce(onFakeGpu(values));
        comm.barrier()->wait();  // after the check: it passed on both ranks
        auto& device = dynamic_cast<detail::DeviceWork&>(*work);
        try {
          device.synchronize(Deadline::after(std::chrono::seconds(20)));
          ADD_FAILURE() << "device work that never ends was reported done";
        } catch (const TimeoutError& e) {
          EXPECT_TRUE(mentions(e, "did not finish on the GPU")) << e.what();
          EXPECT_TRUE(mentions(e, "allreduce #1")) << e.what();
        }
        const auto waited = std::chrono::steady_clock::now() - start;
        EXPECT_GE(waited, std::chrono::milliseconds(900));
        EXPECT_LT(waited, std::chrono::seconds(10));
        // The communicator failed: later calls raise the same error instead of running.
        EXPECT_THROW(comm.allreduce(onFakeGpu(values))->wait(), TimeoutError);
      },
      options);
}

TEST_F(DeviceChecks, AFailedCollectivesBuffersStayInUseUntilTheDeviceStopsIt) {
  // The watchdog fails device work that never ends, and the error is raised at once; but the
  // device may still run the aborted kernel for a while (NCCL's exit when they see the abort), so
  // its buffers must outlive the failure until the device has stopped it. Before, whoever kept a
  // collective's memory alive let it go at the failure.
  testing::setFakeDeviceHangs(true);
  testing::setFakeDeviceStopsLate(true);
  RankOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  std::mutex mutex;
  std::vector<std::shared_ptr<Work>> failed;
  runRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        auto work = comm.allreduce(onFakeGpu(values));
        comm.barrier()->wait();  // after the check: it passed on both ranks
        EXPECT_TRUE(work->buffersInUse()) << "running device work";
        auto& device = dynamic_cast<detail::DeviceWork&>(*work);
        EXPECT_THROW(device.synchronize(Deadline::after(std::chrono::seconds(20))), TimeoutError);
        EXPECT_TRUE(work->isCompleted());
        EXPECT_TRUE(work->buffersInUse()) << "the device has not stopped the failed work yet";
        std::lock_guard lock(mutex);
        failed.push_back(work);
      },
      options);
  ASSERT_EQ(failed.size(), 2u);
  testing::setFakeDeviceStopsLate(false);  // the kernels saw the abort
  for (const auto& work : failed) EXPECT_FALSE(work->buffersInUse());

  testing::setFakeDeviceHangs(false);
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> values(4, 1.0f);
    auto work = comm.allreduce(onFakeGpu(values));
    work->synchronize();
    EXPECT_FALSE(work->buffersInUse()) << "device work that ended";
  });
}

// A call that fails part way, after its body may have launched kernels (here an enqueue that
// fails on rank 1 alone), keeps its buffers in use too: its Work carries a completion recorded on
// the stream after the failure. Before, it carried none, and its buffers were free at once.
TEST_F(DeviceChecks, ACallThatFailsPartWayKeepsItsBuffersInUseUntilTheDeviceStops) {
  testing::setFakeDeviceEnqueueFailsOn(1);
  testing::setFakeDeviceHangs(true);
  testing::setFakeDeviceStopsLate(true);
  RankOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  std::promise<void> rankZeroDone;
  auto done = rankZeroDone.get_future().share();
  std::shared_ptr<Work> failedCall;
  runRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        auto work = comm.allreduce(onFakeGpu(values));
        if (comm.rank() == 1) {
          EXPECT_THROW(work->wait(), InvalidArgumentError);
          EXPECT_TRUE(work->buffersInUse()) << "the device has not stopped what the call launched";
          failedCall = work;
          done.wait();  // alive until rank 0 has its error
          return;
        }
        EXPECT_THROW(comm.barrier()->wait(), Error);
        rankZeroDone.set_value();
      },
      options);
  ASSERT_NE(failedCall, nullptr);
  testing::setFakeDeviceStopsLate(false);
  EXPECT_FALSE(failedCall->buffersInUse());
}

TEST_F(DeviceChecks, TheWatchdogNamesTheFirstStuckWorkBehindManyThatEnded) {
  // Forty collectives end (nobody waits for them), then one never does. The watchdog finds where
  // the ended ones stop without asking each (popEndedPrefix), and still times out the stuck one,
  // by name. The fake's work ends in order, as a stream's does.
  RankOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  runRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> values(4, 1.0f);
        for (int i = 0; i < 40; ++i) comm.allreduce(onFakeGpu(values));  // #1 to #40
        comm.barrier()->wait();                                          // #41
        if (comm.rank() == 0)
          testing::setFakeDeviceHangs(true);
        comm.barrier()->wait();                         // #42: both ranks see it
        auto work = comm.allreduce(onFakeGpu(values));  // #43
        try {
          dynamic_cast<detail::DeviceWork&>(*work).synchronize(
              Deadline::after(std::chrono::seconds(20)));
          ADD_FAILURE() << "device work that never ends was reported done";
        } catch (const TimeoutError& e) {
          EXPECT_TRUE(mentions(e, "allreduce #43")) << e.what();
        }
      },
      options);
}

// The watchdog's search for the ended prefix of its completions: a few queries, not one each.
TEST(DeviceWatchdogPrefix, FindsTheEndedPrefixWithLogarithmicallyManyQueries) {
  for (size_t endedCount : {size_t{0}, size_t{1}, size_t{700}, size_t{999}, size_t{1000}}) {
    int queries = 0;
    const size_t found = detail::DeviceWatchdog::endedPrefix(1000, [&](size_t i) {
      ++queries;
      return i < endedCount;
    });
    EXPECT_EQ(found, endedCount);
    EXPECT_LE(queries, 11) << endedCount << " ended of 1000";  // log2(1000) ~ 10, plus one
  }
  int queries = 0;
  EXPECT_EQ(detail::DeviceWatchdog::endedPrefix(0, [&](size_t) { return ++queries > 0; }), 0u);
  EXPECT_EQ(queries, 0);
  // A query that fails (the collective did) stops the search at what is known to have ended.
  const size_t found = detail::DeviceWatchdog::endedPrefix(1000, [](size_t i) {
    if (i >= 600)
      throw PeerError("the collective failed", 1);
    return i < 700;
  });
  EXPECT_LE(found, 600u);
}

TEST_F(DeviceChecks, MatchingCallsPassTheirChecks) {
  runRanks(3, [](Communicator& comm) {
    std::vector<float> values(6, 1.0f);
    const int before = testing::fakeDeviceCalls();
    for (int i = 0; i < 20; ++i) {
      auto work = comm.allreduce(onFakeGpu(values));
      work->wait();
    }
    auto last = comm.broadcast(onFakeGpu(values), 2);
    dynamic_cast<detail::DeviceWork&>(*last).synchronize(Deadline::after(std::chrono::seconds(20)));
    EXPECT_TRUE(last->isCompleted());
    EXPECT_GE(testing::fakeDeviceCalls() - before, 21);
  });
}

// A non-root's reduce writes no output: its absent one (Tensor()) is not a host tensor mixed in.
TEST_F(DeviceChecks, ANonRootsReduceOfCudaTensorsNeedsNoOutput) {
  runRanks(2, [](Communicator& comm) {
    std::vector<float> values(6, 1.0f);
    auto work = comm.reduce(onFakeGpu(values), 0, ReduceOp::kSum);
    dynamic_cast<detail::DeviceWork&>(*work).synchronize(Deadline::after(std::chrono::seconds(20)));
    EXPECT_EQ(work->exception(), nullptr);
  });
}

TEST_F(DeviceChecks, GroupsOfACommunicatorOnTheGpuSplitItsDeviceBackend) {
  // Ranks are processes, so each one's counters are its own.
  auto statuses = testing::forkRanks(4, [](Communicator& comm) {
    std::vector<float> values(4, 1.0f);
    // Counted from here: the counters are per process, and earlier tests ran in the parent.
    const int made = testing::fakeDeviceBackendsMade();
    const int splits = testing::fakeDeviceSplits();
    // A group made before any CUDA collective makes its own device backend at its first one.
    auto early = comm.split(comm.rank() % 2, comm.rank());
    EXPECT_EQ(testing::fakeDeviceSplits(), splits);
    comm.allreduce(onFakeGpu(values))->wait();
    early->allreduce(onFakeGpu(values))->wait();
    EXPECT_EQ(testing::fakeDeviceBackendsMade(), made + 2);
    // Once the world has one, groups split it: no rendezvous, no new backend.
    auto group = comm.split(comm.rank() / 2, comm.rank());
    EXPECT_EQ(testing::fakeDeviceSplits(), splits + 1);
    group->allreduce(onFakeGpu(values))->wait();
    EXPECT_EQ(testing::fakeDeviceBackendsMade(), made + 2) << "the group made a fresh backend";
    // A rank outside every group (negative color) still takes part in the split.
    auto none = comm.split(comm.rank() == 3 ? -1 : 0, comm.rank());
    EXPECT_EQ(testing::fakeDeviceSplits(), splits + 2);
    EXPECT_EQ(none == nullptr, comm.rank() == 3);
  });
  testing::expectAllSucceeded(statuses);
}

// Blocking calls (under BlockingCalls, as chorus's Python makes them) run on the caller's own
// stream, other calls on the backend's (Note [Blocking calls on the caller's stream]).
TEST_F(DeviceChecks, BlockingCallsRunOnTheCallersStreamAndOthersDoNot) {
  auto statuses = testing::forkRanks(2, [](Communicator& comm) {
    std::vector<float> values(4, 1.0f);
    const int before = testing::fakeDeviceCallsOnCallerStream();  // per process
    comm.allreduce(onFakeGpu(values))->wait();
    EXPECT_EQ(testing::fakeDeviceCallsOnCallerStream(), before);
    {
      BlockingCalls blocking;
      comm.allreduce(onFakeGpu(values))->wait();
      comm.broadcast(onFakeGpu(values), 1)->wait();
    }
    EXPECT_EQ(testing::fakeDeviceCallsOnCallerStream(), before + 2);
    comm.allreduce(onFakeGpu(values))->wait();
    EXPECT_EQ(testing::fakeDeviceCallsOnCallerStream(), before + 2);
  });
  testing::expectAllSucceeded(statuses);
}

}  // namespace
}  // namespace chorus
