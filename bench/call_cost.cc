// chorus-call-cost: what one blocking allreduce costs the caller, for work on the call path
// (docs/performance.md, "2026-11-27: the call path"). A loop of ITERS calls of
// comm->allreduce(in, out) on COUNT float32 elements under BlockingCalls, timed as a whole (no
// clock read per call), 15 rounds; rank 0 prints the fastest and the median round in ns per call.
// On 1 rank it is the front end and the queue alone; under callgrind, the difference of two ITERS
// gives instructions per call.
//
// With TRACE_PATH, rounds alternate between no timeline and a timeline recording toward that path
// (chorus::trace::start before the round, stop after it, untimed), 30 rounds in all. Rounds next
// to each other in time share the machine's state (on a VM, where the host put the two cores), so
// the median of each traced round's time over its untraced neighbour's is what a timeline costs,
// with less noise than separate runs give (docs/observability.md, "Cost").
//
//   chorusrun -np 1 build/bin/chorus-call-cost [ITERS=100000] [COUNT=2] [TRACE_PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "chorus/trace.h"

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int64_t count = argc > 2 ? std::atoll(argv[2]) : 2;
  const std::string tracePath = argc > 3 ? argv[3] : "";
  auto comm = chorus::DistContext::get().communicator();
  std::vector<float> in(count, 1.0f), out(count);
  chorus::BlockingCalls blocking;
  std::vector<double> plain, traced, ratios;
  const int rounds = tracePath.empty() ? 15 : 30;
  for (int round = 0; round < rounds; ++round) {
    const bool tracing = !tracePath.empty() && round % 2 == 1;
    if (tracing)
      chorus::trace::start(tracePath, static_cast<size_t>(iterations) + 16);
    comm->barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      comm->allreduce(chorus::Tensor(in.data(), {count}), chorus::Tensor(out.data(), {count}));
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    (tracing ? traced : plain).push_back(took.count() / iterations);
    if (tracing) {
      chorus::trace::stop();
      ratios.push_back(traced.back() / plain.back());
    }
  }
  if (comm->rank() != 0)
    return 0;
  std::printf("allreduce of %lld float32, %d ranks: fastest round %.1f ns per call, median %.1f\n",
              static_cast<long long>(count), comm->size(),
              *std::min_element(plain.begin(), plain.end()), median(plain));
  if (!traced.empty())
    std::printf(
        "with a timeline: fastest round %.1f ns per call, median %.1f; median of each traced "
        "round over the round before it %.3fx\n",
        *std::min_element(traced.begin(), traced.end()), median(traced), median(ratios));
  return 0;
}
