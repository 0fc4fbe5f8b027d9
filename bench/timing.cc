// Timing and statistics for chorus-bench (see timing.h).
#include "timing.h"

#include <algorithm>
#include <chrono>

namespace chorus::bench {

int scaledIterations(int iters, int64_t bytes, int minimum) {
  if (bytes <= kFullIterationsBytes) {
    return iters;
  }
  int64_t scaled = int64_t{iters} * kFullIterationsBytes / bytes;
  return static_cast<int>(std::max<int64_t>(scaled, std::min(minimum, iters)));
}

std::vector<double> timeIterations(int iters, const std::function<void()>& iteration) {
  std::vector<double> seconds(static_cast<size_t>(iters));
  for (double& elapsed : seconds) {
    auto start = std::chrono::steady_clock::now();
    iteration();
    auto stop = std::chrono::steady_clock::now();
    elapsed = std::chrono::duration<double>(stop - start).count();
  }
  return seconds;
}

void maxAcrossRanks(Communicator& comm, std::vector<double>& values) {
  if (values.empty()) {
    return;
  }
  comm.allreduce(Tensor(values.data(), {static_cast<int64_t>(values.size())}), ReduceOp::kMax)
      ->wait();
}

double median(std::vector<double> values) {
  if (values.empty()) {
    return 0.0;
  }
  size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  double upper = values[middle];
  if (values.size() % 2 == 1) {
    return upper;
  }
  double lower = *std::max_element(values.begin(), values.begin() + middle);
  return (lower + upper) / 2.0;
}

std::vector<double> measureInterleavedMedians(Communicator& comm,
                                              const TimingPlan& plan,
                                              const std::vector<std::function<void()>>& iterations,
                                              const IterationTimer& timer) {
  for (const auto& iteration : iterations) {
    for (int i = 0; i < plan.warmup; ++i) {
      iteration();
    }
  }
  std::vector<std::vector<double>> all(iterations.size());
  for (int repeat = 0; repeat < plan.repeats; ++repeat) {
    for (size_t loop = 0; loop < iterations.size(); ++loop) {
      comm.barrier()->wait();
      std::vector<double> seconds = timer(plan.iters, iterations[loop]);
      maxAcrossRanks(comm, seconds);
      all[loop].insert(all[loop].end(), seconds.begin(), seconds.end());
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& seconds : all) {
    medians.push_back(median(std::move(seconds)));
  }
  return medians;
}

}  // namespace chorus::bench
