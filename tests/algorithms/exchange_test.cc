// Every allgather, all-to-all and barrier row, on groups of 1..8 ranks, with block sizes 0, 1,
// odd and multi-segment, back to back on the same transports. Allgather also runs in place (the
// input is the rank's own block of the output).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "algorithms/algorithm.h"
#include "rank_threads.h"
#include "rows.h"
#include "test_values.h"

namespace chorus::algorithms::testing {
namespace {

class AllgatherRows : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(AllgatherRows, EveryRankGetsEveryBlock) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(allgatherAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (bool inPlace : {false, true}) {
      for (const SizeCase& c : kSizeCases) {
        std::vector<uint8_t> output(c.count * size, 0xee);
        std::vector<uint8_t> separate(c.count);
        uint8_t* input = inPlace ? output.data() + rank * c.count : separate.data();
        fillPattern(input, rank, c.count);
        Peers peers(transport, makeFingerprint(++sequence, Collective::kAllgather, c.count),
                    callDeadline(), workspace, requests);
        peers.setSegmentBytes(c.segmentBytes);
        algorithm.run(peers, AllgatherArgs{input, output.data(), c.count});
        for (int block = 0; block < size; ++block) {
          auto problem = checkPattern(output.data() + block * c.count, block, c.count);
          if (!problem.empty()) {
            failures[rank].push_back((inPlace ? "in place, " : "") + std::to_string(c.count) +
                                     " bytes: " + problem);
          }
        }
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         AllgatherRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(allgatherAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

class AllToAllRows : public ::testing::TestWithParam<RowAndSize> {};

// Rank r's input block i is pattern block r * p + i; so its output block i must be rank i's
// input block r, pattern block i * p + r.
TEST_P(AllToAllRows, BlockIGoesToRankI) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(allToAllAlgorithms(), name);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    uint64_t sequence = 0;
    for (const SizeCase& c : kSizeCases) {
      std::vector<uint8_t> input(c.count * size);
      std::vector<uint8_t> output(c.count * size, 0xee);
      for (int block = 0; block < size; ++block) {
        fillPattern(input.data() + block * c.count, rank * size + block, c.count);
      }
      Peers peers(transport, makeFingerprint(++sequence, Collective::kAllToAll, c.count),
                  callDeadline(), workspace, requests);
      peers.setSegmentBytes(c.segmentBytes);
      algorithm.run(peers, AllToAllArgs{input.data(), output.data(), c.count});
      for (int block = 0; block < size; ++block) {
        auto problem = checkPattern(output.data() + block * c.count, block * size + rank, c.count);
        if (!problem.empty()) {
          failures[rank].push_back(std::to_string(c.count) + " bytes: " + problem);
        }
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         AllToAllRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(allToAllAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

class BarrierRows : public ::testing::TestWithParam<RowAndSize> {};

// Each rank counts itself in before the barrier; nobody may leave round k before all p ranks have
// counted themselves in for round k.
TEST_P(BarrierRows, NobodyLeavesEarly) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(barrierAlgorithms(), name);
  constexpr int kRounds = 5;
  std::vector<std::atomic<int>> arrived(kRounds);
  std::vector<std::vector<std::string>> failures(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    for (int round = 0; round < kRounds; ++round) {
      arrived[round].fetch_add(1);
      Peers peers(transport, makeFingerprint(round + 1, Collective::kBarrier, 0), callDeadline(),
                  workspace, requests);
      algorithm.run(peers, BarrierArgs{});
      const int seen = arrived[round].load();
      if (seen != size) {
        failures[rank].push_back("round " + std::to_string(round) + ": left after " +
                                 std::to_string(seen) + " of " + std::to_string(size) +
                                 " ranks arrived");
      }
    }
  });
  expectClean(size, errors, failures);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         BarrierRows,
                         ::testing::Combine(::testing::ValuesIn(namesOf(barrierAlgorithms())),
                                            ::testing::ValuesIn(kGroupSizes)),
                         rowAndSizeName);

}  // namespace
}  // namespace chorus::algorithms::testing
