// OperationQueue: operations run one at a time in push order, whether the worker, a waiting
// thread (runIfNext) or a blocking caller (claimIfIdle) runs them.
#include "runtime/operation_queue.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <utility>
#include <vector>

namespace chorus::detail {
namespace {

TEST(OperationQueueTest, WaitersAndWorkerKeepOrderAndNeverOverlap) {
  constexpr int kOperations = 2000;
  OperationQueue queue;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::vector<int> order;  // written only by the running operation
  std::vector<OperationQueue::Operation> operations;
  std::vector<std::promise<void>> done(kOperations);
  for (int i = 0; i < kOperations; ++i) {
    operations.push_back(std::make_shared<std::function<void()>>([&, i] {
      if (running.fetch_add(1) != 0)
        overlapped = true;
      order.push_back(i);
      running.fetch_sub(1);
      done[i].set_value();
    }));
  }
  // Four threads each try to run every fourth operation themselves, like blocking callers.
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&, t] {
      for (int i = t; i < kOperations; i += 4) {
        queue.runIfNext(operations[i]);
        done[i].get_future().wait();
      }
    });
  }
  for (auto& operation : operations) queue.push(operation);
  for (auto& waiter : waiters) waiter.join();
  queue.shutdown();
  EXPECT_FALSE(overlapped);
  ASSERT_EQ(order.size(), static_cast<size_t>(kOperations));
  for (int i = 0; i < kOperations; ++i) ASSERT_EQ(order[i], i);
}

TEST(OperationQueueTest, OnlyTheHeadCanBeClaimed) {
  OperationQueue queue;
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> ran{0};
  auto first = std::make_shared<std::function<void()>>([&] {
    gate.wait();
    ++ran;
  });
  auto second = std::make_shared<std::function<void()>>([&] { ++ran; });
  queue.push(first);
  queue.push(second);
  // `second` is not at the head (or `first` is running): the caller may not jump the queue.
  EXPECT_FALSE(queue.runIfNext(second));
  release.set_value();
  queue.shutdown();
  EXPECT_EQ(ran, 2);
}

// claimIfIdle: an idle queue is claimed (the caller runs its operation on its own thread, and no
// worker thread is involved) until releaseRunning(); a busy one is not, and nothing is queued.
TEST(OperationQueueTest, ClaimIfIdleOnlyWhenIdle) {
  OperationQueue queue;
  ASSERT_TRUE(queue.claimIfIdle());
  EXPECT_FALSE(queue.claimIfIdle());  // claimed: the next caller must queue
  std::promise<std::thread::id> queuedRanOn;
  auto queued = std::make_shared<std::function<void()>>(
      [&] { queuedRanOn.set_value(std::this_thread::get_id()); });
  queue.push(queued);  // waits for the claim to end
  auto ran = queuedRanOn.get_future();
  EXPECT_EQ(ran.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  queue.releaseRunning();
  EXPECT_NE(ran.get(), std::this_thread::get_id());  // the worker ran it, after the release

  std::promise<void> release;
  auto gate = release.get_future().share();
  auto first = std::make_shared<std::function<void()>>([&] { gate.wait(); });
  queue.push(first);
  EXPECT_FALSE(queue.claimIfIdle());  // `first` is queued or running
  release.set_value();
  queue.shutdown();
  EXPECT_TRUE(queue.claimIfIdle());  // idle again once everything ran
  queue.releaseRunning();
}

// Note [The worker does not preempt its waker]: the worker runs operations under the default
// policy and sleeps under SCHED_BATCH, where the machine lets a thread choose it (the test asks
// for it on a thread of its own first). The test looks at the worker from outside once it has run
// an operation: it turns to SCHED_BATCH before it sleeps, soon after, whatever the scheduling.
TEST(OperationQueueTest, TheWorkerSleepsUnderSchedBatchAndRunsUnderTheDefaultPolicy) {
  bool allowed = false;
  std::thread probe([&allowed] {
    const sched_param parameters{};
    allowed = pthread_setschedparam(pthread_self(), SCHED_BATCH, &parameters) == 0;
  });
  probe.join();
  if (!allowed)
    GTEST_SKIP() << "this machine forbids SCHED_BATCH";
  OperationQueue queue;
  for (int round = 0; round < 3; ++round) {
    std::promise<std::pair<pid_t, int>> seen;  // the worker's thread id, its policy while running
    queue.push(std::make_shared<std::function<void()>>([&] {
      seen.set_value({gettid(), sched_getscheduler(0)});
    }));  // nothing waits for it
    const auto [worker, running] = seen.get_future().get();
    EXPECT_EQ(running, SCHED_OTHER) << "round " << round;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int sleeping = sched_getscheduler(worker);
    while (sleeping != SCHED_BATCH && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      sleeping = sched_getscheduler(worker);
    }
    EXPECT_EQ(sleeping, SCHED_BATCH) << "round " << round;
  }
  EXPECT_NE(sched_getscheduler(0), SCHED_BATCH);  // the pushing thread keeps its own
  queue.shutdown();
}

// Blocking callers that claim the idle queue (claimIfIdle, lock-free), callers that queue, and
// waiters that run the head themselves, all at once: never two operations at a time, nothing lost.
// Thread 0 only claims, retrying until the queue is idle (it is, at the latest once the others are
// done), so claims certainly run beside the others' pushes however the threads are scheduled; the
// others claim when they happen to find the queue idle and queue otherwise.
TEST(OperationQueueTest, ClaimsPushesAndWaitersNeverOverlap) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 3000;
  OperationQueue queue;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::atomic<int> ran{0};
  auto body = [&] {
    if (running.fetch_add(1) != 0)
      overlapped = true;
    std::this_thread::yield();  // a window for another operation to start, if one could
    running.fetch_sub(1);
    ++ran;
  };
  std::atomic<int> claimed{0};
  auto claimAndRun = [&] {
    body();
    ++claimed;
    queue.releaseClaim();
  };
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int i = 0; i < kPerThread; ++i) {
      while (!queue.claimIfIdle()) std::this_thread::yield();
      claimAndRun();
    }
  });
  for (int t = 1; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if ((i + t) % 3 != 0 && queue.claimIfIdle()) {
          claimAndRun();
          continue;
        }
        std::promise<void> done;
        auto operation = std::make_shared<std::function<void()>>([&] {
          body();
          done.set_value();
        });
        queue.push(operation);
        if (i % 2 == 0)
          queue.runIfNext(operation);
        done.get_future().wait();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  queue.shutdown();
  EXPECT_FALSE(overlapped);
  EXPECT_EQ(ran, kThreads * kPerThread);
  EXPECT_GE(claimed, kPerThread);    // thread 0's claims, at least
  EXPECT_TRUE(queue.claimIfIdle());  // idle at the end: the state word counted back to zero
  queue.releaseClaim();
}

}  // namespace
}  // namespace chorus::detail
