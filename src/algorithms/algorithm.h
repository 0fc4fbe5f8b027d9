// One table per collective: rows in order of preference, each
// {name, summary, supports, preferred, run}.
//
//  - supports(args, groupSize): can this algorithm run the call at all? "Not supported" is a
//    boolean, so selection falls through to the next row.
//  - preferred(args, groupSize): is it the right default for this call (message size, group size)?
//    Default selection takes the first row that supports and prefers the call, else the first row
//    that supports it.
//  - run(peers, args): runs the collective on this rank. Every row handles any group size (size 1
//    trivially: copy input to output where they differ) and any count, including 0. For size > 1
//    every rank sends and receives at least one message (possibly empty), so a mismatched call is
//    always detected (See Note [Collective fingerprint] in core/collective.h). Allreduce and
//    broadcast rows run in place: they are given args.input == args.output (the algorithmic
//    backend copies the input to the output first when a call is out of place).
//
// Tables are explicit arrays in tables.cc, never static self-registration. Adding an algorithm is
// one file plus one row.
#pragma once

#include <span>
#include <string_view>

#include "algorithms/peers.h"
#include "core/collective_args.h"

namespace chorus::algorithms {

template <typename Args>
struct AlgorithmInfo {
  std::string_view name;
  std::string_view summary;
  bool (*supports)(const Args& args, int groupSize);
  bool (*preferred)(const Args& args, int groupSize);
  void (*run)(Peers& peers, const Args& args);
};

// Picks the row to run. `envName` is e.g. "CHORUS_ALLREDUCE_ALGO": if set (and not empty or
// "auto") to a row's name, that row runs when it supports the call (else a warning is logged and
// default selection applies); an unknown name is InvalidArgumentError listing the valid ones.
// No row supporting the call is UnsupportedError. Reads the environment on every call (cheap).
// Defined in tables.cc for the ten argument types below.
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
std::span<const AlgorithmInfo<AllToAllVArgs>> allToAllVAlgorithms();
std::span<const AlgorithmInfo<BarrierArgs>> barrierAlgorithms();

}  // namespace chorus::algorithms
