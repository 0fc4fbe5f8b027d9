// Table selection: defaults by message size, CHORUS_<COLLECTIVE>_ALGO overrides, unknown names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "algorithms/algorithm.h"
#include "chorus/error.h"
#include "rows.h"

namespace chorus::algorithms::testing {
namespace {

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name))
      old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

constexpr const char* kAllreduceEnv = "CHORUS_ALLREDUCE_ALGO";

AllreduceArgs allreduceOfBytes(size_t bytes) {
  return AllreduceArgs{nullptr, nullptr, bytes / 4, DataType::kFloat32, ReduceOp::kSum};
}

std::string_view chosen(const AllreduceArgs& args, int size = 8) {
  return selectAlgorithm(allreduceAlgorithms(), args, size, kAllreduceEnv).name;
}

TEST(Selection, AllreduceDefaultDependsOnSize) {
  ScopedEnv unset(kAllreduceEnv, "");
  EXPECT_EQ(chosen(allreduceOfBytes(4)), "recursive_doubling");
  EXPECT_EQ(chosen(allreduceOfBytes(64 * 1024)), "recursive_doubling");
  EXPECT_EQ(chosen(allreduceOfBytes(64 * 1024 + 4)), "ring");
  EXPECT_EQ(chosen(allreduceOfBytes(64 << 20)), "ring");
  EXPECT_EQ(chosen(allreduceOfBytes(0)), "recursive_doubling");
  // Two ranks: recursive doubling at every size (measured; docs/algorithms.md).
  EXPECT_EQ(chosen(allreduceOfBytes(64 << 20), 2), "recursive_doubling");
  EXPECT_EQ(chosen(allreduceOfBytes(64 << 20), 3), "ring");
}

TEST(Selection, BroadcastAndReduceDefaultsDependOnSize) {
  EXPECT_EQ(selectAlgorithm(broadcastAlgorithms(), BroadcastArgs{nullptr, nullptr, 1000, 0}, 8,
                            "CHORUS_TEST_UNSET_ALGO")
                .name,
            "binomial_tree");
  EXPECT_EQ(selectAlgorithm(broadcastAlgorithms(), BroadcastArgs{nullptr, nullptr, 16 << 20, 0}, 8,
                            "CHORUS_TEST_UNSET_ALGO")
                .name,
            "pipelined_chain");
  const ReduceArgs small{nullptr, nullptr, 10, DataType::kFloat32, ReduceOp::kSum, 0};
  const ReduceArgs large{nullptr, nullptr, 4 << 20, DataType::kFloat32, ReduceOp::kSum, 0};
  EXPECT_EQ(selectAlgorithm(reduceAlgorithms(), small, 8, "CHORUS_TEST_UNSET_ALGO").name,
            "binomial_tree");
  EXPECT_EQ(selectAlgorithm(reduceAlgorithms(), large, 8, "CHORUS_TEST_UNSET_ALGO").name,
            "pipelined_chain");
  // Few ranks: the tree at every size (measured; docs/algorithms.md).
  EXPECT_EQ(selectAlgorithm(reduceAlgorithms(), large, 2, "CHORUS_TEST_UNSET_ALGO").name,
            "binomial_tree");
  EXPECT_EQ(selectAlgorithm(broadcastAlgorithms(), BroadcastArgs{nullptr, nullptr, 16 << 20, 0}, 4,
                            "CHORUS_TEST_UNSET_ALGO")
                .name,
            "binomial_tree");
  const ReduceArgs middle{nullptr, nullptr, 64 << 10, DataType::kFloat32, ReduceOp::kSum, 0};
  EXPECT_EQ(selectAlgorithm(reduceAlgorithms(), middle, 4, "CHORUS_TEST_UNSET_ALGO").name,
            "pipelined_chain");
}

TEST(Selection, EnvironmentForcesARow) {
  {
    ScopedEnv force(kAllreduceEnv, "ring");
    EXPECT_EQ(chosen(allreduceOfBytes(4)), "ring");
  }
  {
    ScopedEnv force(kAllreduceEnv, "recursive_doubling");
    EXPECT_EQ(chosen(allreduceOfBytes(64 << 20)), "recursive_doubling");
  }
  {
    ScopedEnv automatic(kAllreduceEnv, "auto");
    EXPECT_EQ(chosen(allreduceOfBytes(4)), "recursive_doubling");
  }
}

TEST(Selection, UnknownNameIsInvalidArgumentListingValidNames) {
  ScopedEnv force(kAllreduceEnv, "butterfly_of_doom");
  try {
    chosen(allreduceOfBytes(4));
    FAIL() << "an unknown algorithm name was accepted";
  } catch (const InvalidArgumentError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("CHORUS_ALLREDUCE_ALGO"), std::string::npos) << message;
    EXPECT_NE(message.find("butterfly_of_doom"), std::string::npos) << message;
    EXPECT_NE(message.find("ring"), std::string::npos) << message;
    EXPECT_NE(message.find("recursive_doubling"), std::string::npos) << message;
  }
}

// Each collective reads its own variable, and any of its rows can be forced.
template <typename Args>
void expectEveryRowCanBeForced(std::span<const AlgorithmInfo<Args>> table,
                               const Args& args,
                               const char* envName) {
  SCOPED_TRACE(envName);
  ASSERT_FALSE(table.empty());
  std::set<std::string_view> names;
  for (const auto& row : table) {
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate row " << row.name;
    EXPECT_FALSE(row.summary.empty()) << row.name;
    ScopedEnv force(envName, std::string(row.name).c_str());
    EXPECT_EQ(selectAlgorithm(table, args, 5, envName).name, row.name);
  }
  ScopedEnv bogus(envName, "no_such_algorithm");
  EXPECT_THROW(selectAlgorithm(table, args, 5, envName), InvalidArgumentError);
}

TEST(Selection, EveryCollectiveHonoursItsVariable) {
  expectEveryRowCanBeForced(allreduceAlgorithms(), allreduceOfBytes(1024), "CHORUS_ALLREDUCE_ALGO");
  expectEveryRowCanBeForced(
      reduceScatterAlgorithms(),
      ReduceScatterArgs{nullptr, nullptr, 4, DataType::kInt32, ReduceOp::kSum},
      "CHORUS_REDUCE_SCATTER_ALGO");
  expectEveryRowCanBeForced(allgatherAlgorithms(), AllgatherArgs{nullptr, nullptr, 4},
                            "CHORUS_ALLGATHER_ALGO");
  expectEveryRowCanBeForced(broadcastAlgorithms(), BroadcastArgs{nullptr, nullptr, 4, 0},
                            "CHORUS_BROADCAST_ALGO");
  expectEveryRowCanBeForced(reduceAlgorithms(),
                            ReduceArgs{nullptr, nullptr, 4, DataType::kInt32, ReduceOp::kSum, 0},
                            "CHORUS_REDUCE_ALGO");
  expectEveryRowCanBeForced(gatherAlgorithms(), GatherArgs{nullptr, nullptr, 4, 0},
                            "CHORUS_GATHER_ALGO");
  expectEveryRowCanBeForced(scatterAlgorithms(), ScatterArgs{nullptr, nullptr, 4, 0},
                            "CHORUS_SCATTER_ALGO");
  expectEveryRowCanBeForced(allToAllAlgorithms(), AllToAllArgs{nullptr, nullptr, 4},
                            "CHORUS_ALLTOALL_ALGO");
  expectEveryRowCanBeForced(barrierAlgorithms(), BarrierArgs{}, "CHORUS_BARRIER_ALGO");
}

}  // namespace
}  // namespace chorus::algorithms::testing
