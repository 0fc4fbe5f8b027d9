// Timing for chorus-bench: per-iteration wall times with std::chrono::steady_clock, the maximum
// across ranks of each iteration (the slowest rank decides when a collective is done), and the
// median over every iteration of every repeat (the machine is shared and noisy; a median ignores
// the iterations a neighbour's burst slowed down).
//
// Cost: one float64 allreduce(max) of `iters` values and one barrier per timed loop, outside the
// timed region.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::bench {

// Sizes up to this many bytes run the full --iters; larger ones proportionally fewer.
inline constexpr int64_t kFullIterationsBytes = int64_t{16} << 20;

// `iters` for sizes up to kFullIterationsBytes, else iters * kFullIterationsBytes / bytes, but
// never fewer than `minimum`.
int scaledIterations(int iters, int64_t bytes, int minimum);

// Runs `iteration` `iters` times; returns each iteration's local elapsed time in seconds.
std::vector<double> timeIterations(int iters, const std::function<void()>& iteration);

// Replaces each value by its maximum over all ranks of `comm` (one blocking allreduce).
void maxAcrossRanks(Communicator& comm, std::vector<double>& values);

// The median (mean of the two middle values for an even count); 0 for an empty list.
double median(std::vector<double> values);

struct TimingPlan {
  int warmup = 0;
  int iters = 1;
  int repeats = 1;
};

// How a loop is timed: runs `iteration` `iters` times, returns each one's seconds on this rank.
using IterationTimer =
    std::function<std::vector<double>(int iters, const std::function<void()>& iteration)>;

// Times one or more loops side by side (chorus and, with --compare, a reference): `warmup`
// untimed iterations of each in turn, then `repeats` rounds; in each round every loop in turn gets
// a barrier and `iters` timed iterations, so that a slow spell of the machine hits all of them
// alike. Returns, per loop in the order given, the median over all its timed iterations of the
// slowest rank's time, in seconds. Collective: every rank must call it with the same plan and
// number of loops. `timer` times a loop: wall time on the host by default (CUDA events for
// --device cuda, device_bench.h).
std::vector<double> measureInterleavedMedians(Communicator& comm,
                                              const TimingPlan& plan,
                                              const std::vector<std::function<void()>>& iterations,
                                              const IterationTimer& timer = timeIterations);

}  // namespace chorus::bench
