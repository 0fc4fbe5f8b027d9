// Note [Heard from every rank] (algorithms/peers.h), row by row: each row calls
// Peers::heardFromAll() once on every rank of a symmetric collective and on the root of a reduce
// or gather, never in a broadcast or scatter, and only once every rank has entered the call. One
// rank enters 20 ms after the others and says so first; the hook checks that it had. A message
// from that rank exists only after it entered, so a row that hooks where the Note says can never
// see it missing, and a row that hooks too early sees it missing on some rank (the 20 ms).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "rank_threads.h"
#include "rows.h"

namespace chorus::algorithms::testing {
namespace {

constexpr size_t kCount = 24;  // float32 elements per rank, or 96 bytes: in 4-byte segments
constexpr size_t kBytes = kCount * sizeof(float);
const std::vector<int> kSizes = {2, 3, 4, 7, 8};

struct Hooked {
  std::atomic<int> calls{0};
  std::atomic<bool> sawLateRankMissing{false};
  const std::atomic<bool>* lateEntered = nullptr;
};

void onHeard(const void* context) noexcept {
  auto* hooked = const_cast<Hooked*>(static_cast<const Hooked*>(context));
  hooked->calls.fetch_add(1);
  if (!hooked->lateEntered->load())
    hooked->sawLateRankMissing.store(true);
}

enum class Expect { kEveryRank, kRootOnly, kNobody };

template <typename Args>
using ArgsOf = std::function<Args(float* in, float* out, int root)>;

// One row at one size: rank `late` enters 20 ms after the others; checks the hook on every rank.
template <typename Args>
void checkRow(const AlgorithmInfo<Args>& row,
              int size,
              int late,
              int root,
              Collective collective,
              bool typed,
              Expect expect,
              const ArgsOf<Args>& argsOf,
              size_t count = kCount) {
  std::atomic<bool> lateEntered{false};
  std::vector<Hooked> hooked(size);
  auto errors = runRanks(size, [&](int rank, transport::Transport& transport) {
    Workspace workspace;
    RequestPool requests;
    std::vector<float> in(kCount * size, 1.0f), out(kCount * size, 0.0f);
    hooked[rank].lateEntered = &lateEntered;
    if (rank == late) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      lateEntered.store(true);
    }
    Peers peers(
        transport,
        makeFingerprint(1, collective, typed ? count : count * sizeof(float), root,
                        typed ? DataType::kFloat32 : DataType::kUInt8, ReduceOp::kSum, typed),
        callDeadline(), workspace, requests);
    peers.setSegmentBytes(4);  // pipelined rows send many segments
    peers.onHeardFromAll(&onHeard, &hooked[rank]);
    row.run(peers, argsOf(in.data(), out.data(), root));
  });
  const std::string where = std::string(row.name) + ", " + std::to_string(size) +
                            " ranks, late rank " + std::to_string(late) + ", root " +
                            std::to_string(root);
  EXPECT_EQ(describeErrors(errors), "") << where;
  for (int rank = 0; rank < size; ++rank) {
    const bool hooks =
        expect == Expect::kEveryRank || (expect == Expect::kRootOnly && rank == root);
    EXPECT_EQ(hooked[rank].calls.load(), hooks ? 1 : 0) << where << ": rank " << rank;
    EXPECT_FALSE(hooked[rank].sawLateRankMissing.load())
        << where << ": rank " << rank << " said it heard from every rank before rank " << late
        << " had entered";
  }
}

// Every row of `table` at every size: late rank 0 with the middle rank as root, and the last rank
// late with root 0 (roots matter to the rooted rows only).
template <typename Args>
void checkRows(std::span<const AlgorithmInfo<Args>> table,
               Collective collective,
               bool typed,
               Expect expect,
               const ArgsOf<Args>& argsOf) {
  for (const auto& row : table) {
    for (int size : kSizes) {
      checkRow(row, size, 0, size / 2, collective, typed, expect, argsOf);
      checkRow(row, size, size - 1, 0, collective, typed, expect, argsOf);
    }
  }
}

TEST(HeardFromAll, Allreduce) {
  checkRows<AllreduceArgs>(
      allreduceAlgorithms(), Collective::kAllreduce, true, Expect::kEveryRank,
      [](float* in, float*, int) {
        return AllreduceArgs{in, in, kCount, DataType::kFloat32, ReduceOp::kSum};
      });
}

TEST(HeardFromAll, ReduceScatter) {
  checkRows<ReduceScatterArgs>(
      reduceScatterAlgorithms(), Collective::kReduceScatter, true, Expect::kEveryRank,
      [](float* in, float* out, int) {
        return ReduceScatterArgs{in, out, kCount, DataType::kFloat32, ReduceOp::kSum};
      });
}

TEST(HeardFromAll, Allgather) {
  checkRows<AllgatherArgs>(allgatherAlgorithms(), Collective::kAllgather, false, Expect::kEveryRank,
                           [](float* in, float* out, int) {
                             return AllgatherArgs{in, out, kBytes};
                           });
}

TEST(HeardFromAll, AllToAll) {
  checkRows<AllToAllArgs>(allToAllAlgorithms(), Collective::kAllToAll, false, Expect::kEveryRank,
                          [](float* in, float* out, int) {
                            return AllToAllArgs{in, out, kBytes};
                          });
}

TEST(HeardFromAll, Barrier) {
  checkRows<BarrierArgs>(barrierAlgorithms(), Collective::kBarrier, false, Expect::kEveryRank,
                         [](float*, float*, int) { return BarrierArgs{}; });
}

TEST(HeardFromAll, ReduceAtTheRootOnly) {
  checkRows<ReduceArgs>(reduceAlgorithms(), Collective::kReduce, true, Expect::kRootOnly,
                        [](float* in, float* out, int root) {
                          return ReduceArgs{in,  out, kCount, DataType::kFloat32, ReduceOp::kSum,
                                            root};
                        });
}

TEST(HeardFromAll, GatherAtTheRootOnly) {
  checkRows<GatherArgs>(gatherAlgorithms(), Collective::kGather, false, Expect::kRootOnly,
                        [](float* in, float* out, int root) {
                          return GatherArgs{in, out, kBytes, root};
                        });
}

// Empty calls still send one (empty) segment per step, so the ring phases, which note the arrival
// with the last step's first segment, still note it exactly once.
TEST(HeardFromAll, EmptyRingCallsStillHearOnce) {
  for (int size : {2, 3}) {
    checkRow<AllreduceArgs>(
        rowNamed(allreduceAlgorithms(), "ring"), size, size - 1, 0, Collective::kAllreduce, true,
        Expect::kEveryRank,
        [](float* in, float*, int) {
          return AllreduceArgs{in, in, 0, DataType::kFloat32, ReduceOp::kSum};
        },
        0);
    checkRow<ReduceScatterArgs>(
        rowNamed(reduceScatterAlgorithms(), "ring"), size, size - 1, 0, Collective::kReduceScatter,
        true, Expect::kEveryRank,
        [](float* in, float* out, int) {
          return ReduceScatterArgs{in, out, 0, DataType::kFloat32, ReduceOp::kSum};
        },
        0);
    checkRow<AllgatherArgs>(
        rowNamed(allgatherAlgorithms(), "ring"), size, size - 1, 0, Collective::kAllgather, false,
        Expect::kEveryRank,
        [](float* in, float* out, int) {
          return AllgatherArgs{in, out, 0};
        },
        0);
  }
}

TEST(HeardFromAll, NeverInABroadcastOrScatter) {
  checkRows<BroadcastArgs>(broadcastAlgorithms(), Collective::kBroadcast, false, Expect::kNobody,
                           [](float* in, float* out, int root) {
                             return BroadcastArgs{in, out, kBytes, root};
                           });
  checkRows<ScatterArgs>(scatterAlgorithms(), Collective::kScatter, false, Expect::kNobody,
                         [](float* in, float* out, int root) {
                           return ScatterArgs{in, out, kBytes, root};
                         });
}

}  // namespace
}  // namespace chorus::algorithms::testing
