// Every broadcast, reduce, gather and scatter row, on groups of 1..8 ranks, with roots first,
// middle and last, and sizes 0, 1, odd and multi-segment, back to back on the same transports.
// Reduce must leave every input unchanged and never write a non-root's output.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "algorithms/algorithm.h"
#include "rank_threads.h"
#include "rows.h"
#include "test_values.h"

namespace chorus::algorithms::testing {
namespace {

std::string where(int root, size_t count) {
  return "root " + std::to_string(root) + ", size " + std::to_string(count) + ": ";
}

class BroadcastRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(BroadcastRows, EveryRankGetsRootData) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(broadcastAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (int root : testRoots(size)) {
      for (const SizeCase& c : kSizeCases) {
        std::vector<uint8_t> data(c.count, 0xee);
        if (rank == root)
          fillPattern(data.data(), root, c.count);
        Peers peers(transport, makeFingerprint(++sequence, Collective::kBroadcast, c.count, root),
                    callDeadline(), workspace, requests);
        peers.setSegmentBytes(c.segmentBytes);
        algorithm.run(peers, BroadcastArgs{data.data(), data.data(), c.count, root});
        auto problem = checkPattern(data.data(), root, c.count);
        if (!problem.empty())
          failures[rank].push_back(where(root, c.count) + problem);
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         BroadcastRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(broadcastAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

// A message of several default-size segments.
TEST(BroadcastLarge, SeveralDefaultSegments) {
  for (const auto& algorithm : broadcastAlgorithms()) {
    constexpr size_t kBytes = 3 * kDefaultSegmentBytes + 5;
    constexpr int kSize = 4;
    std::vector<std::vector<std::string>> failures(kSize);
    auto errors = runRanks(kSize, [&](int rank, transport::Transport& transport) {
      Workspace workspace;
      RequestPool requests;
      std::vector<uint8_t> data(kBytes, 0);
      if (rank == 2)
        fillPattern(data.data(), 2, kBytes);
      Peers peers(transport, makeFingerprint(1, Collective::kBroadcast, kBytes, 2), callDeadline(),
                  workspace, requests);
      algorithm.run(peers, BroadcastArgs{data.data(), data.data(), kBytes, 2});
      auto problem = checkPattern(data.data(), 2, kBytes);
      if (!problem.empty())
        failures[rank].push_back(problem);
    });
    SCOPED_TRACE(std::string(algorithm.name));
    expectClean(kSize, errors, failures);
  }
}

class ReduceRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(ReduceRows, RootGetsClosedFormInputsUnchanged) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(reduceAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (int root : testRoots(size)) {
      for (const SizeCase& c : kSizeCases) {
        for (const Reduction& reduction : testReductions()) {
          std::vector<double> input(c.count);
          fillContribution(reduction, rank, input.data(), c.count);
          const std::vector<double> before = input;
          std::vector<double> output(c.count, -7.0);
          // Non-roots pass a sentinel buffer on even ranks (it must stay untouched) and null on
          // odd ones (it must not be dereferenced).
          void* out = rank == root || rank % 2 == 0 ? output.data() : nullptr;
          Peers peers(transport,
                      makeFingerprint(++sequence, Collective::kReduce, c.count, root,
                                      reduction.dtype, reduction.op, true),
                      callDeadline(), workspace, requests);
          peers.setSegmentBytes(c.segmentBytes);
          algorithm.run(
              peers, ReduceArgs{input.data(), out, c.count, reduction.dtype, reduction.op, root});
          const std::string prefix = where(root, c.count) + describe(reduction) + ": ";
          if (rank == root) {
            auto problem = checkReduction(reduction, size, output.data(), c.count);
            if (!problem.empty())
              failures[rank].push_back(prefix + problem);
          } else {
            for (double value : output) {
              if (value != -7.0) {
                failures[rank].push_back(prefix + "a non-root's output was written");
                break;
              }
            }
          }
          if (c.count > 0 &&
              std::memcmp(input.data(), before.data(), c.count * sizeof(double)) != 0) {
            failures[rank].push_back(prefix + "input was modified");
          }
        }
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         ReduceRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(reduceAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

class GatherRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(GatherRows, RootGetsBlocksInRankOrder) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(gatherAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (int root : testRoots(size)) {
      for (const SizeCase& c : kSizeCases) {
        std::vector<uint8_t> input(c.count);
        fillPattern(input.data(), rank, c.count);
        std::vector<uint8_t> output(rank == root ? c.count * size : 0, 0xee);
        Peers peers(transport, makeFingerprint(++sequence, Collective::kGather, c.count, root),
                    callDeadline(), workspace, requests);
        peers.setSegmentBytes(c.segmentBytes);
        algorithm.run(
            peers, GatherArgs{input.data(), rank == root ? output.data() : nullptr, c.count, root});
        if (rank != root)
          continue;
        for (int block = 0; block < size; ++block) {
          auto problem = checkPattern(output.data() + block * c.count, block, c.count);
          if (!problem.empty())
            failures[rank].push_back(where(root, c.count) + problem);
        }
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         GatherRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(gatherAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

class ScatterRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(ScatterRows, EveryRankGetsItsBlock) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(scatterAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (int root : testRoots(size)) {
      for (const SizeCase& c : kSizeCases) {
        std::vector<uint8_t> input(rank == root ? c.count * size : 0);
        for (int block = 0; rank == root && block < size; ++block) {
          fillPattern(input.data() + block * c.count, block, c.count);
        }
        std::vector<uint8_t> output(c.count, 0xee);
        Peers peers(transport, makeFingerprint(++sequence, Collective::kScatter, c.count, root),
                    callDeadline(), workspace, requests);
        peers.setSegmentBytes(c.segmentBytes);
        algorithm.run(peers, ScatterArgs{rank == root ? input.data() : nullptr, output.data(),
                                         c.count, root});
        auto problem = checkPattern(output.data(), rank, c.count);
        if (!problem.empty())
          failures[rank].push_back(where(root, c.count) + problem);
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         ScatterRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(scatterAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

}  // namespace
}  // namespace chorus::algorithms::testing
