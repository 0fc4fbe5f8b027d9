// The errors of a sub-communicator name processes by world rank (Note [One rank numbering],
// core/rank_names.h): world ranks 1 and 2 of 3 form a group (split), and its timeout, mismatch and
// closed peer must give world ranks in missingRanks(), ranks() and peerRank() and in the message,
// which says which group it came from (runtime/group_context.h).
// Regression (issue 16, found by the soak harness): they gave the group's own numbers, so a
// survivor named rank 1 when world rank 2 was killed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::RankOptions;
using chorus::testing::runRanks;

constexpr char kGroup[] = "in the group of world ranks [1, 2]: ";

// Runs `fn(group, worldRank)` on world ranks 1 and 2, in a group split off a world of 3; `fn` may
// reset the group (this rank leaves it).
template <typename Fn>
void onGroupOfOneAndTwo(const std::string& backend, Fn fn) {
  RankOptions options;
  options.backend = backend;
  options.timeout = std::chrono::seconds(20);
  runRanks(
      3,
      [&](Communicator& world) {
        auto group = world.split(world.rank() == 0 ? 0 : 1, world.rank());
        if (world.rank() != 0)
          fn(group, world.rank());
      },
      options);
}

class GroupErrorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GroupErrorsTest, TimeoutNamesTheMissingWorldRank) {
  std::promise<void> timedOut;
  std::shared_future<void> done = timedOut.get_future().share();
  onGroupOfOneAndTwo(GetParam(), [&](std::shared_ptr<Communicator>& group, int worldRank) {
    if (worldRank == 2) {
      done.wait_for(std::chrono::seconds(30));  // stays in the group, never calls
      return;
    }
    struct Release {
      std::promise<void>& promise;
      ~Release() { promise.set_value(); }
    } release{timedOut};
    group->setTimeout(std::chrono::milliseconds(1500));
    std::vector<float> data(4, 1.0f);
    try {
      group->allreduce(Tensor(data.data(), {4}))->wait();
      ADD_FAILURE() << "the allreduce returned";
    } catch (const TimeoutError& e) {
      EXPECT_EQ(e.missingRanks(), std::vector<int>{2}) << e.what();
      EXPECT_EQ(std::string(e.what()).find(kGroup), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1 (this process)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("waiting for rank 2"), std::string::npos) << e.what();
    }
  });
}

TEST_P(GroupErrorsTest, MismatchNamesWorldRanks) {
  onGroupOfOneAndTwo(GetParam(), [](std::shared_ptr<Communicator>& group, int worldRank) {
    const int count = worldRank == 2 ? 5 : 4;
    std::vector<float> data(count, 1.0f);
    try {
      group->allreduce(Tensor(data.data(), {count}))->wait();
      ADD_FAILURE() << "world rank " << worldRank << ": the allreduce returned";
    } catch (const MismatchError& e) {
      EXPECT_EQ(e.field(), "count") << e.what();
      std::vector<int> ranks = e.ranks();
      std::sort(ranks.begin(), ranks.end());
      EXPECT_EQ(ranks, (std::vector<int>{1, 2})) << e.what();
    }
  });
}

TEST_P(GroupErrorsTest, ClosedPeerIsNamedByItsWorldRank) {
  onGroupOfOneAndTwo(GetParam(), [](std::shared_ptr<Communicator>& group, int worldRank) {
    std::vector<float> data(4, 1.0f);
    if (worldRank == 2) {
      group.reset();  // leaves the group (says goodbye) without calling
      return;
    }
    try {
      group->allreduce(Tensor(data.data(), {4}))->wait();
      ADD_FAILURE() << "the allreduce returned";
    } catch (const PeerError& e) {
      EXPECT_EQ(e.peerRank(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2 has closed"), std::string::npos) << e.what();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         GroupErrorsTest,
                         ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace chorus
