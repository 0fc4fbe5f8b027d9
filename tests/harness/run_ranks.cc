#include "harness/run_ranks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <mutex>
#include <thread>

#include "core/net/handshake.h"
#include "harness/fork_first.h"
#include "runtime/communicator_factory.h"
#include "store/hash_store.h"
#include "store/tcp_store.h"

namespace chorus::testing {
namespace {

std::atomic<int> runCounter{0};

detail::WorldOptions worldOptions(int rank,
                                  int size,
                                  const RankOptions& options,
                                  std::shared_ptr<store::Store> store,
                                  const std::string& token,
                                  const std::string& scope) {
  detail::WorldOptions world;
  world.rank = rank;
  world.size = size;
  world.nodeId = options.nodeIds.empty() ? "node0" : options.nodeIds.at(rank);
  world.store = std::move(store);
  world.token = token;
  world.backend = options.backend;
  world.timeout = options.timeout;
  world.scope = scope;
  return world;
}

std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void runRanks(int size, const RankFunction& fn, const RankOptions& options) {
  auto store = std::make_shared<store::HashStore>();
  const std::string token = "test-token";
  const std::string scope = "run" + std::to_string(runCounter++);
  std::mutex mutex;
  std::vector<std::shared_ptr<Communicator>> comms(size);
  std::vector<std::future<void>> results;
  for (int rank = 0; rank < size; ++rank) {
    results.push_back(std::async(std::launch::async, [&, rank] {
      auto comm =
          detail::createWorldCommunicator(worldOptions(rank, size, options, store, token, scope));
      {
        std::lock_guard lock(mutex);
        comms[rank] = comm;
      }
      fn(*comm);
      std::lock_guard lock(mutex);
      comms[rank].reset();
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  bool timedOut = false;
  for (auto& result : results) {
    if (result.wait_until(deadline) != std::future_status::ready)
      timedOut = true;
  }
  if (timedOut) {
    ADD_FAILURE() << "runRanks(" << size << "): ranks still running after "
                  << options.deadline.count() << " s; aborting their communicators";
    {
      std::lock_guard lock(mutex);
      for (auto& comm : comms) {
        if (comm)
          comm->abort();
      }
    }
    for (auto& result : results) {
      if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        std::fprintf(stderr, "runRanks: a rank ignored abort; exiting instead of hanging\n");
        std::abort();
      }
    }
  }
  for (int rank = 0; rank < size; ++rank) {
    try {
      results[rank].get();
    } catch (...) {
      ADD_FAILURE() << "rank " << rank << " threw: " << describe(std::current_exception());
    }
  }
}

void runWithRankOneSilent(const RankFunction& rankZero, const RankOptions& options) {
  std::promise<void> rankZeroDone;
  std::shared_future<void> done = rankZeroDone.get_future().share();
  runRanks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {
          done.wait();
          return;
        }
        struct Release {
          std::promise<void>& promise;
          ~Release() { promise.set_value(); }
        } release{rankZeroDone};
        rankZero(comm);
      },
      options);
}

// The children are forked before the store's threads start (see harness/fork_first.h).
std::vector<int> forkRanks(int size, const RankFunction& fn, const RankOptions& options) {
  const std::string token = net::generateToken();
  ForkFirst forked(token, std::chrono::duration_cast<std::chrono::seconds>(options.deadline));
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    children.push_back(forked.fork([&, rank](const net::Address& address) {
      try {
        auto store =
            std::make_shared<store::TcpStore>(address, token, Deadline::after(options.timeout));
        auto comm = detail::createWorldCommunicator(
            worldOptions(rank, size, options, store, token, "forked"));
        fn(*comm);
        return ::testing::Test::HasFailure() ? 1 : 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "forkRanks: rank %d threw: %s\n", rank, e.what());
        return 1;
      }
    }));
  }
  forked.start();
  // One waiter thread per child turns waitpid into futures we can wait on with a deadline.
  std::vector<std::future<int>> statuses;
  for (pid_t pid : children) {
    statuses.push_back(std::async(std::launch::async, [pid] {
      int status = 0;
      while (waitpid(pid, &status, 0) == -1 && errno == EINTR) {
      }
      return status;
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  std::vector<int> result;
  for (int rank = 0; rank < size; ++rank) {
    if (statuses[rank].wait_until(deadline) != std::future_status::ready) {
      ADD_FAILURE() << "forkRanks: rank " << rank << " still running after "
                    << options.deadline.count() << " s; killing it";
      for (pid_t pid : children) kill(pid, SIGKILL);
    }
    result.push_back(statuses[rank].get());
  }
  return result;
}

void expectAllSucceeded(const std::vector<int>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    int status = statuses[rank];
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " ended with "
        << (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                              : "signal " + std::to_string(WTERMSIG(status)));
  }
}

}  // namespace chorus::testing
