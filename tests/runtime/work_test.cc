// Work's waits: wait() and waitFor(timeout) on a Work that a second thread finishes (a test
// implementation, since only implementations may finish a Work), and on a recv whose peer has not
// sent yet. waitFor must tell "not yet" (false, no exception) from "failed" (the failure rethrown,
// also when the failure is itself a TimeoutError) and from "done" (true).
#include "chorus/work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using chorus::testing::RankOptions;
using chorus::testing::runRanks;

// Users cannot complete a Work they were given: finish() is for implementations only.
template <typename W>
concept CanFinish = requires(W& work) {
  work.finish();
};
static_assert(!CanFinish<Work>, "Work::finish must not be public");

// A Work that the test finishes itself.
class ManualWork : public Work {
 public:
  ManualWork() : Work("manual work") {}
  using Work::finish;
};

// Finishes `work` with `error` once `go` is set: the second thread of the tests below.
std::thread finishWhenTold(ManualWork& work,
                           std::shared_future<void> go,
                           std::exception_ptr error = nullptr) {
  return std::thread([&work, go, error] {
    go.wait();
    work.finish(error);
  });
}

// A Work whose implementation runs it when a waiter offers its thread (runIfNext).
class RunsWhereOffered : public Work {
 public:
  RunsWhereOffered() : Work("runs where offered") {}
  int offers = 0;
  std::thread::id ranOn;

 protected:
  void runIfNext() noexcept override {
    ++offers;
    ranOn = std::this_thread::get_id();
    finish();
  }
};

// runHereIfNext() offers the calling thread, as a wait without a timeout does, and not again once
// the Work is complete; a wait with a timeout never offers it.
TEST(WorkTest, RunHereIfNextOffersTheCallingThreadUntilTheWorkIsComplete) {
  RunsWhereOffered work;
  EXPECT_FALSE(work.waitFor(0ms));
  EXPECT_EQ(work.offers, 0) << "a wait with a timeout ran the operation";
  work.runHereIfNext();
  EXPECT_EQ(work.offers, 1);
  EXPECT_EQ(work.ranOn, std::this_thread::get_id());
  EXPECT_TRUE(work.isCompleted());
  work.runHereIfNext();
  work.wait();
  EXPECT_EQ(work.offers, 1) << "offered again after it completed";
}

TEST(WorkTest, WaitForReturnsFalseWithoutThrowingWhileTheWorkRuns) {
  ManualWork work;
  bool completed = true;
  EXPECT_NO_THROW(completed = work.waitFor(0ms));
  EXPECT_FALSE(completed);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(completed = work.waitFor(50ms));
  EXPECT_FALSE(completed);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms) << "waitFor returned before its time";
  EXPECT_FALSE(work.isCompleted());
  EXPECT_EQ(work.exception(), nullptr);
}

TEST(WorkTest, WaitForReturnsTrueOnceAnotherThreadFinishesTheWork) {
  ManualWork work;
  std::promise<void> go;
  std::thread finisher = finishWhenTold(work, go.get_future().share());
  EXPECT_FALSE(work.waitFor(20ms));
  go.set_value();
  EXPECT_TRUE(work.waitFor(30s));  // returns as soon as the other thread has finished it
  finisher.join();
  EXPECT_TRUE(work.isCompleted());
  // Again after completion: at once, whatever the timeout.
  EXPECT_TRUE(work.waitFor(0ms));
  EXPECT_TRUE(work.waitFor(Work::kNoTimeout));
  EXPECT_NO_THROW(work.wait());
}

// Completion takes no lock (an atomic word and a futex): every waiter, bounded or not, already
// asleep or just arriving, must be woken by a finish from another thread, and the first finish
// wins. Many rounds, so that the finish lands at every point of a waiter's way into its sleep. A
// lost wake would leave a waiter asleep for good: the test gives each 30 s, then fails.
TEST(WorkTest, EveryWaiterIsWokenByAFinishFromAnotherThread) {
  constexpr int kRounds = 300;
  for (int round = 0; round < kRounds; ++round) {
    auto work = std::make_shared<ManualWork>();
    std::vector<std::future<bool>> woken;
    for (int i = 0; i < 4; ++i) {
      std::promise<bool> result;
      woken.push_back(result.get_future());
      // Detached: a waiter that is never woken must not hang the test at its end.
      std::thread([work, i, result = std::move(result)]() mutable {
        result.set_value(i % 2 == 0 ? work->waitFor(Work::kNoTimeout) : work->waitFor(60s));
      }).detach();
    }
    work->finish();
    work->finish(std::make_exception_ptr(InternalError("a second finish")));  // ignored
    for (auto& waiter : woken) {
      ASSERT_EQ(waiter.wait_for(30s), std::future_status::ready)
          << "round " << round << ": a waiter was not woken";
      ASSERT_TRUE(waiter.get()) << "round " << round;
    }
    ASSERT_EQ(work->exception(), nullptr);
  }
}

TEST(WorkTest, WaitForRethrowsTheFailure) {
  ManualWork work;
  std::promise<void> go;
  std::thread finisher = finishWhenTold(work, go.get_future().share(),
                                        std::make_exception_ptr(PeerError("rank 1 died", 1)));
  EXPECT_FALSE(work.waitFor(20ms));
  go.set_value();
  try {
    work.waitFor(30s);
    ADD_FAILURE() << "waitFor returned although the work failed";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.peerRank(), 1);
  }
  finisher.join();
  EXPECT_THROW(work.waitFor(0ms), PeerError);
  EXPECT_THROW(work.waitFor(Work::kNoTimeout), PeerError);
  EXPECT_THROW(work.wait(), PeerError);
}

TEST(WorkTest, WaitForRethrowsATimeoutErrorOfTheOperationInsteadOfReturningFalse) {
  ManualWork work;
  std::promise<void> go;
  go.set_value();
  std::thread finisher = finishWhenTold(
      work, go.get_future().share(), std::make_exception_ptr(TimeoutError("rank 0 waited", {1})));
  finisher.join();
  EXPECT_THROW(work.waitFor(0ms), TimeoutError);
  EXPECT_THROW(work.waitFor(30s), TimeoutError);
}

TEST(WorkTest, WaitWithATimeoutStillThrowsTimeoutErrorNamingTheWork) {
  ManualWork work;
  try {
    work.wait(10ms);
    ADD_FAILURE() << "wait(10ms) returned on a running work";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("manual work did not complete within 10 ms"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(work.isCompleted());
}

// Sets the promise when it goes out of scope, unless it was set already: a rank that fails early
// still releases the rank waiting for it (which would otherwise hang, not fail).
class Release {
 public:
  explicit Release(std::promise<void>& promise) : promise_(promise) {}
  ~Release() { set(); }
  void set() {
    if (!done_)
      promise_.set_value();
    done_ = true;
  }

 private:
  std::promise<void>& promise_;
  bool done_ = false;
};

TEST(WorkTest, WaitForOnARecvWhosePeerHasNotSentYet) {
  // Rank 0 sends only after rank 1 has seen its recv still running (ranks are threads here).
  std::promise<void> receiverChecked;
  auto sendNow = receiverChecked.get_future().share();
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> value(3, -1.0f);
    if (comm.rank() == 1) {
      Release release(receiverChecked);
      auto recv = comm.recv(Tensor(value.data(), {3}), 0, 7);
      bool completed = true;
      EXPECT_NO_THROW(completed = recv->waitFor(50ms));
      EXPECT_FALSE(completed);
      EXPECT_FALSE(recv->isCompleted());
      release.set();
      EXPECT_TRUE(recv->waitFor(30s));
      EXPECT_EQ(value, std::vector<float>(3, 5.0f));
    } else {
      sendNow.wait();
      value.assign(3, 5.0f);
      comm.send(Tensor(value.data(), {3}), 1, 7)->wait();
    }
  });
}

TEST(WorkTest, WaitForRethrowsARecvThatTimedOut) {
  // The peer never sends: the recv fails at the communicator's deadline, and waitFor, asked to
  // wait longer than that, rethrows the recv's TimeoutError rather than returning false.
  RankOptions options;
  options.timeout = 1000ms;
  std::promise<void> receiverDone;
  auto leave = receiverDone.get_future().share();
  runRanks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 0) {
          leave.wait();
          return;
        }
        Release release(receiverDone);
        std::vector<float> value(3);
        auto recv = comm.recv(Tensor(value.data(), {3}), 0, 7);
        EXPECT_THROW(recv->waitFor(30s), TimeoutError);
        EXPECT_TRUE(recv->isCompleted());
      },
      options);
}

}  // namespace
}  // namespace chorus
