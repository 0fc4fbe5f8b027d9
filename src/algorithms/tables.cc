// The algorithm tables, one per collective, and selection among their rows (see algorithm.h).
//
// Rows are in order of preference. Thresholds are per-rank message sizes; they were picked from
// the cost models in each algorithm's opening comment (latency-bound below, bandwidth-bound
// above) and are meant to be retuned with chorus-bench on real links.
#include <cstdlib>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/implementations.h"
#include "core/check.h"
#include "core/logging.h"

namespace chorus::algorithms {

namespace {

// Thresholds, from the cost models and from crossover runs over tcp on one 2-core machine (each
// row forced, 2 and 4 ranks, 1 KiB to 4 MiB, medians of 3 runs; docs/algorithms.md):
// Allreduce: recursive doubling moves count * log2 p elements in log2 p steps, the ring
// 2(p-1)/p * count in 2(p-1) steps. Below this size the step count dominates (4 ranks: the ring
// won from 256 KiB). With 2 ranks both move the whole vector once and recursive doubling takes one
// step instead of two: it won at every size (4 MiB: 1.3 vs 3.3 ms).
constexpr size_t kAllreduceRecursiveDoublingMaxBytes = 64 * 1024;
// Broadcast: a binomial tree takes log2 p message-times, the pipelined chain about p - 1 +
// segments segment-times. Up to 4 ranks the tree won at 1 and 4 MiB (the root's log2 p sends are
// few); the chain pays off only where log2 p grows (cost model, not measured here).
constexpr size_t kBroadcastTreeMaxBytes = kDefaultSegmentBytes;
constexpr int kBroadcastTreeMaxRanks = 4;
// Reduce: the same shapes; the chain won from 256 KiB at 4 ranks, the tree at every size at 2.
constexpr size_t kReduceTreeMaxBytes = 64 * 1024;

template <typename Args>
bool always(const Args&, int) {
  return true;
}

bool smallAllreduce(const AllreduceArgs& args, int groupSize) {
  return groupSize <= 2 ||
         args.count * dataTypeSize(args.dtype) <= kAllreduceRecursiveDoublingMaxBytes;
}
bool smallBroadcast(const BroadcastArgs& args, int groupSize) {
  return groupSize <= kBroadcastTreeMaxRanks || args.bytes <= kBroadcastTreeMaxBytes;
}
bool smallReduce(const ReduceArgs& args, int groupSize) {
  return groupSize <= 2 || args.count * dataTypeSize(args.dtype) <= kReduceTreeMaxBytes;
}

constexpr AlgorithmInfo<AllreduceArgs> kAllreduceAlgorithms[] = {
    {"recursive_doubling", "log2 p steps of the whole vector; small vectors, any p", always,
     smallAllreduce, allreduceRecursiveDoubling},
    {"ring", "reduce-scatter + allgather in 2(p-1) pipelined steps; bandwidth-optimal, any p",
     always, always, allreduceRing},
};

constexpr AlgorithmInfo<ReduceScatterArgs> kReduceScatterAlgorithms[] = {
    {"ring", "p-1 pipelined steps; bandwidth-optimal, any p", always, always, reduceScatterRing},
};

constexpr AlgorithmInfo<AllgatherArgs> kAllgatherAlgorithms[] = {
    {"ring", "p-1 pipelined steps, in place; bandwidth-optimal, any p", always, always,
     allgatherRing},
};

constexpr AlgorithmInfo<BroadcastArgs> kBroadcastAlgorithms[] = {
    {"binomial_tree", "log2 p rounds of the whole message; small messages", always, smallBroadcast,
     broadcastBinomialTree},
    {"pipelined_chain", "segments forwarded along a chain; large messages", always, always,
     broadcastPipelinedChain},
};

constexpr AlgorithmInfo<ReduceArgs> kReduceAlgorithms[] = {
    {"binomial_tree", "log2 p rounds of the whole vector; small vectors", always, smallReduce,
     reduceBinomialTree},
    {"pipelined_chain", "segments reduced and forwarded along a chain; large vectors", always,
     always, reducePipelinedChain},
};

constexpr AlgorithmInfo<GatherArgs> kGatherAlgorithms[] = {
    {"linear", "the root receives from everyone at once", always, always, gatherLinear},
};

constexpr AlgorithmInfo<ScatterArgs> kScatterAlgorithms[] = {
    {"linear", "the root sends to everyone at once", always, always, scatterLinear},
};

constexpr AlgorithmInfo<AllToAllArgs> kAllToAllAlgorithms[] = {
    {"pairwise", "p-1 steps, one partner each way per step", always, always, allToAllPairwise},
};

constexpr AlgorithmInfo<AllToAllVArgs> kAllToAllVAlgorithms[] = {
    {"pairwise", "p-1 steps, one partner each way per step", always, always, allToAllVPairwise},
};

constexpr AlgorithmInfo<BarrierArgs> kBarrierAlgorithms[] = {
    {"dissemination", "ceil(log2 p) rounds of empty messages, any p", always, always,
     barrierDissemination},
};

template <typename Args>
std::string rowNames(std::span<const AlgorithmInfo<Args>> table) {
  std::string names;
  for (const auto& row : table) {
    if (!names.empty())
      names += ", ";
    names += row.name;
  }
  return names;
}

}  // namespace

template <typename Args>
const AlgorithmInfo<Args>& selectAlgorithm(std::span<const AlgorithmInfo<Args>> table,
                                           const Args& args,
                                           int groupSize,
                                           const char* envName) {
  const char* forced = envName == nullptr ? nullptr : std::getenv(envName);
  if (forced != nullptr && *forced != '\0' && std::string_view(forced) != "auto") {
    const AlgorithmInfo<Args>* named = nullptr;
    for (const auto& row : table) {
      if (row.name == forced)
        named = &row;
    }
    CHORUS_CHECK_ARG(named != nullptr, envName, "=", forced,
                     " names no algorithm; valid values: ", rowNames(table),
                     " (or auto). Fix or unset ", envName, ".");
    if (named->supports(args, groupSize))
      return *named;
    CHORUS_LOG(kWarn) << envName << "=" << forced << " cannot run this call (group size "
                      << groupSize << "); choosing another algorithm";
  }
  for (const auto& row : table) {
    if (row.supports(args, groupSize) && row.preferred(args, groupSize))
      return row;
  }
  for (const auto& row : table) {
    if (row.supports(args, groupSize))
      return row;
  }
  throw UnsupportedError(detail::concat("no algorithm among (", rowNames(table),
                                        ") supports this call on a group of ", groupSize,
                                        " ranks"));
}

#define CHORUS_TABLE(Args, function, table)                                                       \
  std::span<const AlgorithmInfo<Args>> function() { return table; }                               \
  template const AlgorithmInfo<Args>& selectAlgorithm<Args>(std::span<const AlgorithmInfo<Args>>, \
                                                            const Args&, int, const char*)

CHORUS_TABLE(AllreduceArgs, allreduceAlgorithms, kAllreduceAlgorithms);
CHORUS_TABLE(ReduceScatterArgs, reduceScatterAlgorithms, kReduceScatterAlgorithms);
CHORUS_TABLE(AllgatherArgs, allgatherAlgorithms, kAllgatherAlgorithms);
CHORUS_TABLE(BroadcastArgs, broadcastAlgorithms, kBroadcastAlgorithms);
CHORUS_TABLE(ReduceArgs, reduceAlgorithms, kReduceAlgorithms);
CHORUS_TABLE(GatherArgs, gatherAlgorithms, kGatherAlgorithms);
CHORUS_TABLE(ScatterArgs, scatterAlgorithms, kScatterAlgorithms);
CHORUS_TABLE(AllToAllArgs, allToAllAlgorithms, kAllToAllAlgorithms);
CHORUS_TABLE(AllToAllVArgs, allToAllVAlgorithms, kAllToAllVAlgorithms);
CHORUS_TABLE(BarrierArgs, barrierAlgorithms, kBarrierAlgorithms);

#undef CHORUS_TABLE

}  // namespace chorus::algorithms
