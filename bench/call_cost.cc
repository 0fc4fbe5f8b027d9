// chorus-call-cost: what one blocking allreduce costs the caller, for work on the call path
// (docs/performance.md, "2026-11-27: the call path"). A loop of ITERS calls of
// comm->allreduce(in, out) on COUNT float32 elements under BlockingCalls, timed as a whole (no
// clock read per call), 15 rounds; rank 0 prints the fastest and the median round in ns per call.
// On 1 rank it is the front end and the queue alone; under callgrind, the difference of two ITERS
// gives instructions per call.
//
//   chorusrun -np 1 build/bin/chorus-call-cost [ITERS=100000] [COUNT=2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "chorus/chorus.h"

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int64_t count = argc > 2 ? std::atoll(argv[2]) : 2;
  auto comm = chorus::DistContext::get().communicator();
  std::vector<float> in(count, 1.0f), out(count);
  chorus::BlockingCalls blocking;
  std::vector<double> rounds;
  for (int round = 0; round < 15; ++round) {
    comm->barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      comm->allreduce(chorus::Tensor(in.data(), {count}), chorus::Tensor(out.data(), {count}));
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    rounds.push_back(took.count() / iterations);
  }
  std::sort(rounds.begin(), rounds.end());
  if (comm->rank() == 0)
    std::printf(
        "allreduce of %lld float32, %d ranks: fastest round %.1f ns per call, median %.1f\n",
        static_cast<long long>(count), comm->size(), rounds.front(), rounds[rounds.size() / 2]);
  return 0;
}
