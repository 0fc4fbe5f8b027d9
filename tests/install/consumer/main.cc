// Consumer of an installed chorus: rank r holds {r + 1, 2(r + 1)}; after allreduce(sum) every rank
// holds {N(N+1)/2, N(N+1)}. Built by tests/install/install_test.sh against the installed headers
// and libchorus.so (through find_package and through pkg-config); runs alone (1 rank, void
// backend) and under chorusrun.
#include <chrono>
#include <cstdio>
#include <vector>

#include "chorus/chorus.h"

int main() {
  try {
    auto comm = chorus::DistContext::get().communicator();
    const int n = comm->size();
    const float mine = static_cast<float>(comm->rank() + 1);
    std::vector<float> value = {mine, 2 * mine};
    comm->allreduce(chorus::Tensor(value.data(), {2}))->wait();
    const float expected = n * (n + 1) / 2.0f;
    if (value[0] != expected || value[1] != 2 * expected) {
      std::fprintf(stderr, "install consumer: rank %d holds {%g, %g}, expected {%g, %g}\n",
                   comm->rank(), value[0], value[1], expected, 2 * expected);
      return 1;
    }
    if (!comm->barrier()->waitFor(std::chrono::seconds(60))) {
      std::fprintf(stderr, "install consumer: rank %d: the barrier did not complete in 60 s\n",
                   comm->rank());
      return 1;
    }
    if (comm->rank() == 0)
      std::printf("install consumer: OK on %d ranks\n", n);
    chorus::DistContext::get().shutdown();
    return 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "install consumer failed: %s\n", e.what());
    return 1;
  }
}
