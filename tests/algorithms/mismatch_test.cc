// Inconsistent calls across ranks (a different count, root or collective on one rank) must be
// caught promptly, never hang: see Note [Ring check] in src/algorithms/stream.h. Where every
// rank's result depends on every other rank (allreduce), every rank raises MismatchError in that
// very call. Where it does not (rooted collectives), a rank may finish before the mismatch is
// seen elsewhere; then at least one rank raises MismatchError in the call and every transport has
// failed with it by the time all ranks are done, so the others raise it at their next call.
// Every row of the affected tables is tried.
#include <gtest/gtest.h>

#include <vector>

#include "algorithms/algorithm.h"
#include "chorus/error.h"
#include "rank_threads.h"
#include "rows.h"

namespace chorus::algorithms::testing {
namespace {

// Well under the transport deadline: detection must not wait for a timeout.
constexpr auto kPrompt = std::chrono::seconds(8);

void expectMismatchOnEveryRank(const std::vector<std::exception_ptr>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank]) {
      ADD_FAILURE() << "rank " << rank << " finished without an error";
      continue;
    }
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const MismatchError&) {
      // expected
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << " raised something else: " << e.what();
    }
  }
}

bool isMismatch(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const MismatchError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The weaker guarantee, for collectives where a rank can finish without hearing from everyone.
void expectMismatchCaught(const std::vector<std::exception_ptr>& errors,
                          const std::vector<std::exception_ptr>& transportFailures) {
  int raised = 0;
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank])
      continue;
    ++raised;
    EXPECT_TRUE(isMismatch(errors[rank]))
        << "rank " << rank << ": " << describeErrors({errors[rank]});
  }
  EXPECT_GT(raised, 0) << "no rank noticed the mismatch";
  for (size_t rank = 0; rank < transportFailures.size(); ++rank) {
    EXPECT_TRUE(transportFailures[rank] && isMismatch(transportFailures[rank]))
        << "rank " << rank << "'s transport has not failed with MismatchError";
  }
}

class AllreduceMismatch : public ::testing::TestWithParam<RowAndSize> {};

TEST_P(AllreduceMismatch, CountDiffersOnRankZero) {
  const auto& [name, size] = GetParam();
  const auto& algorithm = rowNamed(allreduceAlgorithms(), name);
  auto errors = runRanks(
      size,
      [&](int rank, transport::Transport& transport) {
        Workspace workspace;
        RequestPool requests;
        const size_t count = rank == 0 ? 10 : 11;
        std::vector<float> data(count, 1.0f);
        Peers peers(transport,
                    makeFingerprint(1, Collective::kAllreduce, count, -1, DataType::kFloat32,
                                    ReduceOp::kSum, true),
                    Deadline::after(std::chrono::seconds(10)), workspace, requests);
        algorithm.run(peers, AllreduceArgs{data.data(), data.data(), count, DataType::kFloat32,
                                           ReduceOp::kSum});
      },
      kPrompt);
  expectMismatchOnEveryRank(errors);
}

INSTANTIATE_TEST_SUITE_P(AllRows,
                         AllreduceMismatch,
                         ::testing::Combine(::testing::ValuesIn(namesOf(allreduceAlgorithms())),
                                            ::testing::Values(2, 3, 4, 7)),
                         rowAndSizeName);

// Rank 0 names root 0, the others root 1.
template <typename Args, typename MakeArgs>
void expectRootMismatchCaught(std::span<const AlgorithmInfo<Args>> table,
                              Collective collective,
                              MakeArgs makeArgs) {
  for (const auto& algorithm : table) {
    for (int size : {2, 3, 4, 7}) {
      SCOPED_TRACE(std::string(algorithm.name) + " p" + std::to_string(size));
      std::vector<std::exception_ptr> transportFailures;
      auto errors = runRanks(
          size,
          [&](int rank, transport::Transport& transport) {
            Workspace workspace;
            RequestPool requests;
            const int root = rank == 0 ? 0 : 1;
            std::vector<double> input(64 * size, 1.0), output(64 * size, 0.0);
            Peers peers(transport, makeFingerprint(1, collective, 64, root),
                        Deadline::after(std::chrono::seconds(10)), workspace, requests);
            algorithm.run(peers, makeArgs(input.data(), output.data(), root));
          },
          kPrompt, &transportFailures);
      expectMismatchCaught(errors, transportFailures);
    }
  }
}

TEST(RootMismatch, Broadcast) {
  expectRootMismatchCaught(broadcastAlgorithms(), Collective::kBroadcast,
                           [](double*, double* output, int root) {
                             return BroadcastArgs{output, output, 64, root};
                           });
}

TEST(RootMismatch, Reduce) {
  expectRootMismatchCaught(
      reduceAlgorithms(), Collective::kReduce, [](double* input, double* output, int root) {
        return ReduceArgs{input, output, 64, DataType::kFloat64, ReduceOp::kSum, root};
      });
}

TEST(RootMismatch, Gather) {
  expectRootMismatchCaught(gatherAlgorithms(), Collective::kGather,
                           [](double* input, double* output, int root) {
                             return GatherArgs{input, output, 64, root};
                           });
}

TEST(RootMismatch, Scatter) {
  expectRootMismatchCaught(scatterAlgorithms(), Collective::kScatter,
                           [](double* input, double* output, int root) {
                             return ScatterArgs{input, output, 64, root};
                           });
}

// Rank 0 enters a barrier while the others enter an allreduce.
TEST(CollectiveMismatch, BarrierAgainstAllreduce) {
  for (const auto& allreduce : allreduceAlgorithms()) {
    SCOPED_TRACE(std::string(allreduce.name));
    auto errors = runRanks(
        4,
        [&](int rank, transport::Transport& transport) {
          Workspace workspace;
          RequestPool requests;
          std::vector<float> data(100, 1.0f);
          if (rank == 0) {
            Peers peers(transport, makeFingerprint(1, Collective::kBarrier, 0),
                        Deadline::after(std::chrono::seconds(10)), workspace, requests);
            barrierAlgorithms()[0].run(peers, BarrierArgs{});
          } else {
            Peers peers(transport,
                        makeFingerprint(1, Collective::kAllreduce, 100, -1, DataType::kFloat32,
                                        ReduceOp::kSum, true),
                        Deadline::after(std::chrono::seconds(10)), workspace, requests);
            allreduce.run(peers, AllreduceArgs{data.data(), data.data(), 100, DataType::kFloat32,
                                               ReduceOp::kSum});
          }
        },
        kPrompt);
    expectMismatchOnEveryRank(errors);
  }
}

// A local error half-way through a collective (here a kernel refusing a bitwise op on floats,
// which the front end would normally have caught) must not leave the other ranks waiting: the
// failing rank raises it, and its Peers fails the transport so every other rank raises too.
TEST(LocalError, FailsEveryRankInsteadOfHanging) {
  for (const auto& algorithm : allreduceAlgorithms()) {
    SCOPED_TRACE(std::string(algorithm.name));
    auto errors = runRanks(
        3,
        [&](int rank, transport::Transport& transport) {
          Workspace workspace;
          RequestPool requests;
          std::vector<float> data(1000, 1.0f);
          Peers peers(transport,
                      makeFingerprint(1, Collective::kAllreduce, data.size(), -1,
                                      DataType::kFloat32, ReduceOp::kSum, true),
                      Deadline::after(std::chrono::seconds(10)), workspace, requests);
          const ReduceOp op = rank == 1 ? ReduceOp::kBand : ReduceOp::kSum;
          algorithm.run(
              peers, AllreduceArgs{data.data(), data.data(), data.size(), DataType::kFloat32, op});
        },
        kPrompt);
    for (size_t rank = 0; rank < errors.size(); ++rank) {
      ASSERT_TRUE(errors[rank]) << "rank " << rank << " finished without an error";
      try {
        std::rethrow_exception(errors[rank]);
      } catch (const InvalidArgumentError&) {
        EXPECT_EQ(rank, 1u) << "only rank 1 made the bad call";
      } catch (const TimeoutError& e) {
        ADD_FAILURE() << "rank " << rank << " timed out: " << e.what();
      } catch (const Error&) {
        EXPECT_NE(rank, 1u);
      }
    }
  }
}

}  // namespace
}  // namespace chorus::algorithms::testing
