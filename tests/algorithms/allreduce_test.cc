// Every allreduce and reduce-scatter row, on groups of 1..8 ranks (powers of two and not), with
// counts 0, 1, 7 (fewer than p or not divisible by p), 100 and 1037 (many segments when the
// segment size is made tiny), several dtypes and ops, checked against closed forms. Several calls
// run back to back on the same transports, so a message left over by one call would fail the next.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "algorithms/algorithm.h"
#include "rank_threads.h"
#include "rows.h"
#include "test_values.h"

namespace chorus::algorithms::testing {
namespace {

struct Case {
  size_t count;
  size_t segmentBytes;
};

// Counts with the default segment size, then with a tiny one (many uneven segments per chunk).
constexpr Case kCases[] = {
    {0, kDefaultSegmentBytes},
    {1, kDefaultSegmentBytes},
    {7, kDefaultSegmentBytes},
    {100, kDefaultSegmentBytes},
    {100, 32},
    {1037, 24},
};

class AllreduceRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(AllreduceRows, MatchesClosedForm) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(allreduceAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (const Case& c : kCases) {
      for (const Reduction& reduction : testReductions()) {
        std::vector<double> storage(c.count);  // 8-byte aligned, big enough for every dtype
        fillContribution(reduction, rank, storage.data(), c.count);
        Peers peers(transport,
                    makeFingerprint(++sequence, Collective::kAllreduce, c.count, -1,
                                    reduction.dtype, reduction.op, true),
                    callDeadline(), workspace, requests);
        peers.setSegmentBytes(c.segmentBytes);
        algorithm.run(peers, AllreduceArgs{storage.data(), storage.data(), c.count, reduction.dtype,
                                           reduction.op});
        auto problem = checkReduction(reduction, size, storage.data(), c.count);
        if (!problem.empty()) {
          failures[rank].push_back("count " + std::to_string(c.count) + ": " + problem);
        }
      }
    }
  });
  EXPECT_EQ(describeErrors(errors), "");
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_TRUE(failures[rank].empty()) << "rank " << rank << ": " << failures[rank].front();
  }
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         AllreduceRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(allreduceAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

// A large odd count (many default-size segments, chunks of unequal size) on a few group sizes.
class AllreduceLarge : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(AllreduceLarge, OddCountFloat32Sum) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(allreduceAlgorithms(), name);
  constexpr size_t kCount = 1000003;
  const Reduction reduction{DataType::kFloat32, ReduceOp::kSum};
  std::vector<std::string> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    std::vector<float> data(kCount);
    fillContribution(reduction, rank, data.data(), kCount);
    Peers peers(
        transport,
        makeFingerprint(1, Collective::kAllreduce, kCount, -1, reduction.dtype, reduction.op, true),
        callDeadline(), workspace, requests);
    algorithm.run(peers,
                  AllreduceArgs{data.data(), data.data(), kCount, reduction.dtype, reduction.op});
    failures[rank] = checkReduction(reduction, size, data.data(), kCount);
  });
  EXPECT_EQ(describeErrors(errors), "");
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         AllreduceLarge,
                         ::testing::Combine(::testing::ValuesIn(namesOf(allreduceAlgorithms())),
                                            ::testing::Values(3, 8)),
                         rowAndSizeName);

class ReduceScatterRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(ReduceScatterRows, MatchesClosedFormAndKeepsInput) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(reduceScatterAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (const Case& c : kCases) {
      for (const Reduction& reduction : testReductions()) {
        const size_t perRank = c.count;
        const size_t total = perRank * static_cast<size_t>(size);
        std::vector<double> input(total);
        std::vector<double> output(perRank);
        fillContribution(reduction, rank, input.data(), total);
        const std::vector<double> before = input;
        Peers peers(transport,
                    makeFingerprint(++sequence, Collective::kReduceScatter, total, -1,
                                    reduction.dtype, reduction.op, true),
                    callDeadline(), workspace, requests);
        peers.setSegmentBytes(c.segmentBytes);
        algorithm.run(peers, ReduceScatterArgs{input.data(), output.data(), perRank,
                                               reduction.dtype, reduction.op});
        auto problem = checkReduction(reduction, size, output.data(), perRank, rank * perRank);
        if (!problem.empty()) {
          failures[rank].push_back("per rank " + std::to_string(perRank) + ": " + problem);
        }
        if (total > 0 && std::memcmp(input.data(), before.data(), total * sizeof(double)) != 0) {
          failures[rank].push_back("input was modified");
        }
      }
    }
  });
  EXPECT_EQ(describeErrors(errors), "");
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_TRUE(failures[rank].empty()) << "rank " << rank << ": " << failures[rank].front();
  }
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         ReduceScatterRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(reduceScatterAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

}  // namespace
}  // namespace chorus::algorithms::testing
