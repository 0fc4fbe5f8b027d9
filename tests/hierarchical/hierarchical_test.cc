// The hierarchical backend on node layouts that real launchers cannot make on one machine: ranks as
// threads (runRanks) with simulated node ids, including nodes whose members are not contiguous in
// rank order, three nodes, a node of one, and the degenerate layouts (one node, every rank alone).
// Also what "auto" picks for each kind of layout. Expected values are closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/run_ranks.h"

namespace chorus {
namespace {

struct Layout {
  std::string name;
  std::vector<std::string> nodeIds;  // rank r runs on node nodeIds[r]
};

// Rank r's value at index i: small integers, so every sum here is exact in every dtype used.
double valueAt(int rank, size_t i) { return (rank + 1) + static_cast<double>(i % 5); }
double sumAt(int p, size_t i) { return p * (p + 1) / 2.0 + p * static_cast<double>(i % 5); }

testing::RankOptions hierarchicalOn(const Layout& layout) {
  testing::RankOptions options;
  options.backend = "hierarchical";
  options.nodeIds = layout.nodeIds;
  return options;
}

class HierarchicalTest : public ::testing::TestWithParam<Layout> {
 protected:
  int size() const { return static_cast<int>(GetParam().nodeIds.size()); }

  // Runs `call` on every rank with a 20 s timeout: each rank must raise MismatchError (whose
  // message holds `word`), and all within 10 s, so not by a timeout.
  void expectMismatchEverywhere(const std::function<void(Communicator&)>& call,
                                const std::string& word = "") {
    std::atomic<int> mismatches{0};
    testing::RankOptions options = hierarchicalOn(GetParam());
    options.timeout = std::chrono::seconds(20);
    const auto start = std::chrono::steady_clock::now();
    testing::runRanks(
        size(),
        [&](Communicator& comm) {
          try {
            call(comm);
            ADD_FAILURE() << "rank " << comm.rank() << " returned";
          } catch (const MismatchError& e) {
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
            ++mismatches;
          } catch (const Error& e) {
            ADD_FAILURE() << "rank " << comm.rank() << ": expected MismatchError, got " << e.what();
          }
        },
        options);
    EXPECT_EQ(mismatches.load(), size());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  }
};

// Counts around the shm backend's small-message limit (32 KiB) and chunk slot (512 KiB).
constexpr size_t kCounts[] = {0, 1, 7, 8192, 8193, 131072 * 3 + 5};

TEST_P(HierarchicalTest, AllreduceSumOfFloat32) {
  const int p = size();
  testing::runRanks(
      p,
      [&](Communicator& comm) {
        EXPECT_EQ(comm.backendName(), "hierarchical");
        for (size_t count : kCounts) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(valueAt(comm.rank(), i));
          comm.allreduce(Tensor(data.data(), {static_cast<int64_t>(count)}))->wait();
          size_t wrong = 0;
          for (size_t i = 0; i < count; ++i) wrong += data[i] != static_cast<float>(sumAt(p, i));
          EXPECT_EQ(wrong, 0u) << "count " << count << " on rank " << comm.rank();
        }
      },
      hierarchicalOn(GetParam()));
}

TEST_P(HierarchicalTest, AllreduceMaxOfFloat64AndAvgOfInt32) {
  const int p = size();
  testing::runRanks(
      p,
      [&](Communicator& comm) {
        const size_t count = 20000;  // 160 KB of float64: the chunked path
        std::vector<double> values(count);
        std::vector<int32_t> integers(count);
        for (size_t i = 0; i < count; ++i) {
          values[i] = valueAt(comm.rank(), i);
          integers[i] = static_cast<int32_t>(valueAt(comm.rank(), i));
        }
        comm.allreduce(Tensor(values.data(), {20000}), ReduceOp::kMax)->wait();
        comm.allreduce(Tensor(integers.data(), {20000}), ReduceOp::kAvg)->wait();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(values[i], valueAt(p - 1, i)) << "max, element " << i;
          ASSERT_EQ(integers[i], static_cast<int32_t>(sumAt(p, i)) / p) << "avg, element " << i;
        }
      },
      hierarchicalOn(GetParam()));
}

TEST_P(HierarchicalTest, OtherCollectivesAndBarrier) {
  const int p = size();
  testing::runRanks(
      p,
      [&](Communicator& comm) {
        const int r = comm.rank();
        comm.barrier()->wait();
        std::vector<int64_t> in = {10 * r, 10 * r + 1};
        std::vector<int64_t> out(2 * p, -1);
        comm.allgather(Tensor(in.data(), {2}), Tensor(out.data(), {2 * p}))->wait();
        for (int q = 0; q < p; ++q) {
          EXPECT_EQ(out[2 * q], 10 * q);
          EXPECT_EQ(out[2 * q + 1], 10 * q + 1);
        }
        std::vector<float> value(1000, r == p - 1 ? 7.5f : -1.0f);
        comm.broadcast(Tensor(value.data(), {1000}), p - 1)->wait();
        EXPECT_EQ(value, std::vector<float>(1000, 7.5f));
        std::vector<double> x(3 * p);
        for (int j = 0; j < 3 * p; ++j) x[j] = r + j;
        std::vector<double> chunk(3);
        comm.reduceScatter(Tensor(x.data(), {3 * p}), Tensor(chunk.data(), {3}))->wait();
        for (int k = 0; k < 3; ++k) EXPECT_EQ(chunk[k], p * (p - 1) / 2.0 + p * (3.0 * r + k));
        comm.barrier()->wait();
      },
      hierarchicalOn(GetParam()));
}

// The last rank calls with another count; every rank must raise MismatchError (not a timeout: the
// communicators' timeout is 30 s, the run's deadline 60 s, and this must finish well before).
TEST_P(HierarchicalTest, CountMismatchOnTheLastRankIsAMismatchEverywhere) {
  const int p = size();
  expectMismatchEverywhere([&](Communicator& comm) {
    const int count = comm.rank() == p - 1 ? 5 : 4;
    std::vector<float> data(count, 1.0f);
    comm.allreduce(Tensor(data.data(), {count}))->wait();
  });
}

// Regression (issue 16): the ranks of the last rank's node call allgather, the others allreduce.
// Their steps run over different transports (the node's shm, the leaders' tcp, the flat tcp), so
// no message carries one call's fingerprint to a rank of the other; before the census compared
// calls (Note [Census agreement]) this was a TimeoutError at the deadline. Every rank must raise
// MismatchError naming the collective, well before the 20 s timeout.
TEST_P(HierarchicalTest, DifferentCollectivesOnDifferentNodesAreAMismatchEverywhere) {
  const std::vector<std::string>& nodes = GetParam().nodeIds;
  const int p = size();
  if (std::count(nodes.begin(), nodes.end(), nodes.back()) == p)
    GTEST_SKIP() << "one node: the shm step sees every mismatch";
  expectMismatchEverywhere(
      [&](Communicator& comm) {
        std::vector<float> in(4, 1.0f), out(4 * p);
        if (nodes[comm.rank()] == nodes.back())
          comm.allgather(Tensor(in.data(), {4}), Tensor(out.data(), {4 * p}))->wait();
        else
          comm.allreduce(Tensor(in.data(), {4}))->wait();
      },
      "collective");
}

// Regression (issue 16, found by the soak): a rank that leaves must be named by its world rank on
// every survivor, whichever step noticed: the node's shm step, the leaders' tcp step or the flat
// tcp. The group reverses the world's order, so member indices, step indices and world ranks all
// differ. Before every layer named world ranks (Note [One rank numbering]) a survivor that noticed
// in a step gave the victim's index in that step, and one that heard it from another survivor
// gave the numbers of whatever step that survivor was in.
TEST_P(HierarchicalTest, ARankThatLeavesIsNamedByItsWorldRankEverywhere) {
  const int p = size();
  constexpr int kVictim = 1;  // a world rank; its index in the reversed group is p - 2
  std::atomic<int> named{0};
  testing::RankOptions options = hierarchicalOn(GetParam());
  options.timeout = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  testing::runRanks(
      p,
      [&](Communicator& world) {
        std::shared_ptr<Communicator> group = world.split(0, p - 1 - world.rank());
        ASSERT_EQ(group->rank(), p - 1 - world.rank());
        if (world.rank() == kVictim) {
          group.reset();  // says goodbye on every step's transport
          return;
        }
        std::vector<float> data(4, 1.0f);
        try {
          group->allreduce(Tensor(data.data(), {4}))->wait();
          ADD_FAILURE() << "world rank " << world.rank() << ": the allreduce returned";
        } catch (const PeerError& e) {
          EXPECT_EQ(e.peerRank(), kVictim) << "world rank " << world.rank() << ": " << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1 has closed its communicator"),
                    std::string::npos)
              << e.what();
          ++named;
        } catch (const Error& e) {
          ADD_FAILURE() << "world rank " << world.rank() << ": expected PeerError, got "
                        << e.what();
        }
      },
      options);
  EXPECT_EQ(named.load(), p - 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// A rank that never calls: every other rank's TimeoutError names it by its world rank (from the
// census, or from the waits of the steps, which name world ranks too).
TEST_P(HierarchicalTest, ARankThatNeverCallsIsNamedByItsWorldRankEverywhere) {
  const int p = size();
  constexpr int kLate = 1;
  std::atomic<int> named{0};
  testing::RankOptions options = hierarchicalOn(GetParam());
  options.timeout = std::chrono::seconds(20);
  testing::runRanks(
      p,
      [&](Communicator& world) {
        std::shared_ptr<Communicator> group = world.split(0, p - 1 - world.rank());
        if (world.rank() != kLate) {
          group->setTimeout(std::chrono::seconds(3));
          std::vector<float> data(4, 1.0f);
          try {
            group->allreduce(Tensor(data.data(), {4}))->wait();
            ADD_FAILURE() << "world rank " << world.rank() << ": the allreduce returned";
          } catch (const TimeoutError& e) {
            EXPECT_EQ(e.missingRanks(), std::vector<int>{kLate})
                << "world rank " << world.rank() << ": " << e.what();
            ++named;
          } catch (const Error& e) {
            ADD_FAILURE() << "world rank " << world.rank() << ": expected TimeoutError, got "
                          << e.what();
          }
        }
        world.barrier()->wait();  // the late rank stays in the group until the others are done
      },
      options);
  EXPECT_EQ(named.load(), p - 1);
}

std::vector<Layout> layouts() {
  return {
      {"TwoByTwo", {"a", "a", "b", "b"}},
      {"Interleaved", {"a", "b", "a", "b"}},  // members of a node are not adjacent ranks
      {"ThreeAndOne", {"a", "a", "a", "b"}},
      {"OneTwoTwo", {"a", "b", "b", "c", "c"}},
      {"ThreeThreeTwo", {"a", "b", "c", "a", "b", "c", "a", "b"}},
      {"OneNode", {"a", "a", "a"}},         // no leaders' step
      {"EveryRankAlone", {"a", "b", "c"}},  // no local steps
  };
}

INSTANTIATE_TEST_SUITE_P(Layouts,
                         HierarchicalTest,
                         ::testing::ValuesIn(layouts()),
                         [](const auto& info) { return info.param.name; });

// What backend "auto" picks: shm on one node, hierarchical across nodes when some node has several
// members, tcp when every member is alone on its node; and sub-communicators follow their own
// members' layout.
TEST(HierarchicalSelection, AutoFollowsTheLayout) {
  struct Expectation {
    std::vector<std::string> nodeIds;
    std::string world;  // the backend of the world
    std::string pair;   // of the split {0, 2} ({1} is alone: void)
  };
  const std::vector<Expectation> expectations = {
      {{"a", "a", "a"}, "shm", "shm"},
      {{"a", "a", "b"}, "hierarchical", "tcp"},
      {{"a", "b", "c"}, "tcp", "tcp"},
  };
  for (const auto& expectation : expectations) {
    testing::RankOptions options;
    options.nodeIds = expectation.nodeIds;
    testing::runRanks(
        3,
        [&](Communicator& comm) {
          EXPECT_EQ(comm.backendName(), expectation.world);
          auto sub = comm.split(comm.rank() == 2 ? 0 : comm.rank(), comm.rank());
          EXPECT_EQ(sub->backendName(), comm.rank() == 1 ? "void" : expectation.pair);
        },
        options);
  }
}

}  // namespace
}  // namespace chorus
