// One table per collective: rows in order of preference, each {name, summary, supports, run}.
// Selection takes the first row whose supports() accepts the call (message size, group size),
// unless CHORUS_<COLLECTIVE>_ALGO names a row. "Not supported" is a boolean, so selection falls
// through to the next row; tables are explicit arrays, never static self-registration.
#pragma once

#include <span>
#include <string_view>

#include "algorithms/collective_args.h"
#include "algorithms/peers.h"

namespace chorus::algorithms {

template <typename Args>
struct AlgorithmInfo {
  std::string_view name;
  std::string_view summary;
  bool (*supports)(const Args& args, int groupSize);
  void (*run)(Peers& peers, const Args& args);
};

// Picks the row to run. `envName` is e.g. "CHORUS_ALLREDUCE_ALGO": if set to a row's name, that row
// runs when it supports the call (else a warning is logged and normal selection applies); an
// unknown name is InvalidArgumentError listing the valid ones.
template <typename Args>
const AlgorithmInfo<Args>& selectAlgorithm(std::span<const AlgorithmInfo<Args>> table,
                                           const Args& args,
                                           int groupSize,
                                           const char* envName);

std::span<const AlgorithmInfo<AllreduceArgs>> allreduceAlgorithms();
std::span<const AlgorithmInfo<ReduceScatterArgs>> reduceScatterAlgorithms();
std::span<const AlgorithmInfo<AllgatherArgs>> allgatherAlgorithms();
std::span<const AlgorithmInfo<BroadcastArgs>> broadcastAlgorithms();
std::span<const AlgorithmInfo<ReduceArgs>> reduceAlgorithms();
std::span<const AlgorithmInfo<GatherArgs>> gatherAlgorithms();
std::span<const AlgorithmInfo<ScatterArgs>> scatterAlgorithms();
std::span<const AlgorithmInfo<AllToAllArgs>> allToAllAlgorithms();
std::span<const AlgorithmInfo<BarrierArgs>> barrierAlgorithms();

}  // namespace chorus::algorithms
