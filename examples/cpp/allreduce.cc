// The seed example: rank r holds r + 1; after an allreduce (sum) every rank holds N(N+1)/2.
// Rank 0 gathers every rank's before/after values and prints them as a table.
//
//   chorusrun -np 4 build/bin/allreduce
#include <cstdio>
#include <vector>

#include "chorus/chorus.h"

int main() {
  try {
    auto comm = chorus::DistContext::get().communicator();
    const int n = comm->size();
    std::vector<float> value = {static_cast<float>(comm->rank() + 1)};
    const float before = value[0];
    comm->allreduce(chorus::Tensor(value.data(), {1}))->wait();

    std::vector<float> mine = {before, value[0]};
    std::vector<float> table(comm->rank() == 0 ? 2 * n : 0);
    comm->gather(chorus::Tensor(mine.data(), {2}),
                 chorus::Tensor(table.data(), {static_cast<int64_t>(table.size())}), 0)
        ->wait();
    if (comm->rank() != 0)
      return 0;

    const float expected = n * (n + 1) / 2.0f;
    bool ok = true;
    std::printf("allreduce(sum) over %d ranks (backend %s)\n\n", n, comm->backendName().c_str());
    std::printf("  rank | before | after\n  -----+--------+------\n");
    for (int r = 0; r < n; ++r) {
      std::printf("  %4d | %6g | %5g\n", r, table[2 * r], table[2 * r + 1]);
      ok = ok && table[2 * r + 1] == expected;
    }
    std::printf("\nevery rank holds N(N+1)/2 = %g: %s\n", expected, ok ? "OK" : "WRONG");
    return ok ? 0 : 1;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "allreduce example failed: %s\n", e.what());
    return 1;
  }
}
