// chorus-bench: nccl-tests-style bandwidth and latency sweeps of chorus collectives.
//
//   chorusrun -np 4 build/bin/chorus-bench --op allreduce --max 64M --check --repeats 3
//
// Every rank runs the same sweeps; rank 0 prints one table per collective (see sweep.h and
// docs/benchmarks.md). Exit code 0, 1 when --check found a wrong element, 2 on a usage or
// communication error.
#include <cstdio>

#include "chorus/chorus.h"
#include "collective.h"
#include "options.h"
#include "sweep.h"

int main(int argc, char** argv) {
  using namespace chorus::bench;
  ParseResult parsed = parseOptions(argc, argv);
  if (!parsed.options) {
    return parsed.exitCode;
  }
  const BenchOptions& options = *parsed.options;
  int rank = -1;
  try {
    auto comm = chorus::DistContext::get().communicator();
    rank = comm->rank();
    if (options.root >= comm->size()) {
      if (rank == 0) {
        std::fprintf(stderr, "chorus-bench: --root %d is not a rank of this job of %d ranks\n",
                     options.root, comm->size());
      }
      return 2;
    }
    int64_t wrong = 0;
    for (const std::string& name : options.ops) {
      wrong += runSweep(*comm, options, *findCollective(name));
    }
    chorus::DistContext::get().shutdown();
    return wrong > 0 ? 1 : 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "chorus-bench: rank %d (this process) failed: %s\n", rank, e.what());
    return 2;
  }
}
