// Run by launcher_integration_test through chorusrun: every rank loops over allreduce, and rank 1
// kills itself with SIGKILL in the middle. Survivors report the PeerError they get.
#include <signal.h>

#include <cstdio>
#include <vector>

#include "chorus/chorus.h"

int main() {
  auto comm = chorus::DistContext::get().communicator();
  std::vector<float> values(4096, 1.0f);
  try {
    for (int i = 0; i < 1000; ++i) {
      if (comm->rank() == 1 && i == 3)
        raise(SIGKILL);
      comm->allreduce(chorus::Tensor(values.data(), {4096}))->wait();
    }
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", comm->rank(), e.what());
    return 2;
  }
  return 0;
}
