// Every row of every algorithm table over real TCP sockets (ranks as threads), forced through the
// CHORUS_<COLLECTIVE>_ALGO variables, for group sizes that include non-powers of two and counts
// that include 0, 1, odd and larger than one pipeline segment.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <string>
#include <vector>

#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::runRanks;

// One choice per table; together the variants cover every row.
const std::vector<std::map<std::string, std::string>> kVariants = {
    {{"CHORUS_ALLREDUCE_ALGO", "recursive_doubling"},
     {"CHORUS_BROADCAST_ALGO", "binomial_tree"},
     {"CHORUS_REDUCE_ALGO", "binomial_tree"}},
    {{"CHORUS_ALLREDUCE_ALGO", "ring"},
     {"CHORUS_BROADCAST_ALGO", "pipelined_chain"},
     {"CHORUS_REDUCE_ALGO", "pipelined_chain"}},
};

class AlgorithmRowsTest : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override {
    for (const auto& [name, value] : kVariants[std::get<1>(GetParam())]) {
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : kVariants[std::get<1>(GetParam())]) unsetenv(name.c_str());
  }
};

TEST_P(AlgorithmRowsTest, ReductionsAndBroadcastMatchClosedForms) {
  const int p = std::get<0>(GetParam());
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int64_t count : {0, 1, 7, 300007}) {
      // allreduce, int32: rank r holds r + i % 3; the sum is p(p-1)/2 + p * (i % 3).
      std::vector<int32_t> ints(count);
      for (int64_t i = 0; i < count; ++i) ints[i] = r + static_cast<int32_t>(i % 3);
      comm.allreduce(Tensor(ints.data(), {count}))->wait();
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(ints[i], p * (p - 1) / 2 + p * (i % 3)) << "allreduce count " << count;
      }
      // max over float64: the largest rank's value.
      std::vector<double> doubles(count, r * 1.5);
      comm.allreduce(Tensor(doubles.data(), {count}), ReduceOp::kMax)->wait();
      for (double v : doubles) ASSERT_EQ(v, (p - 1) * 1.5);
      for (int root : {0, p - 1}) {
        std::vector<float> data(count, r == root ? 3.25f : 0.0f);
        comm.broadcast(Tensor(data.data(), {count}), root)->wait();
        for (float v : data) ASSERT_EQ(v, 3.25f) << "broadcast count " << count;
        std::vector<int64_t> values(count, r + 1);
        comm.reduce(Tensor(values.data(), {count}), root)->wait();
        for (int64_t v : values) ASSERT_EQ(v, r == root ? p * (p + 1) / 2 : r + 1);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(SizesAndRows,
                         AlgorithmRowsTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 7, 8),
                                            ::testing::Values(0, 1)),
                         [](const auto& info) {
                           return "size" + std::to_string(std::get<0>(info.param)) + "_variant" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace chorus
