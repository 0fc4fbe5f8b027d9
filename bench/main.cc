// chorus-bench: nccl-tests-style bandwidth and latency sweeps of chorus collectives.
//
//   chorusrun -np 4 build/bin/chorus-bench --op allreduce --max 64M --check --repeats 3
//   mpirun -np 2 build/bin/chorus-bench --compare mpi --op allreduce --max 64M --csv out.csv
//   chorusrun -np 2 build/bin/chorus-bench --device cuda --compare nccl --op all --check
//
// Every rank runs the same sweeps; rank 0 prints one table per collective (see sweep.h, report.h
// and docs/benchmarks.md). With --compare mpi the MPI library's own collectives are timed beside
// chorus's (mpi_reference.h); with --device cuda the sweep runs on GPU buffers, and --compare nccl
// times raw NCCL beside it (device_bench.h). Exit code 0, 1 when --check found a wrong element, 2
// on a usage or communication error.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "chorus/chorus.h"
#include "collective.h"
#include "options.h"
#include "report.h"
#include "sweep.h"
#ifdef CHORUS_WITH_NCCL
#include "device_bench.h"
#endif
#ifdef CHORUS_WITH_MPI
#include "mpi_reference.h"
#endif

namespace {

using namespace chorus::bench;

// Rank 0's report, or null on the other ranks. Every rank learns whether rank 0 could open the
// --csv file (one allreduce), so that all of them exit when it could not. Returns false then.
bool makeReport(chorus::Communicator& comm,
                const BenchOptions& options,
                std::unique_ptr<Report>& report) {
  int64_t failed = 0;
  if (comm.rank() == 0) {
    try {
      report = std::make_unique<Report>(options);
    } catch (const chorus::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      failed = 1;
    }
  }
  comm.allreduce(chorus::Tensor(&failed, {1}), chorus::ReduceOp::kSum)->wait();
  return failed == 0;
}

// Runs every requested sweep; returns the wrong elements over all of them.
int64_t runSweeps(chorus::Communicator& comm, const BenchOptions& options, Report* report) {
#ifdef CHORUS_WITH_MPI
  std::unique_ptr<MpiReference> mpi;
  if (options.compareMpi) {
    mpi = MpiReference::forCommunicator(comm);
  }
#endif
  int64_t wrong = 0;
  for (const std::string& name : options.ops) {
    const Collective& collective = *findCollective(name);
#ifdef CHORUS_WITH_NCCL
    if (options.onDevice) {
      wrong += runDeviceSweep(comm, options, collective, report);
      continue;
    }
#endif
    std::unique_ptr<ReferenceCollective> reference;
#ifdef CHORUS_WITH_MPI
    if (mpi) {
      reference = std::make_unique<ReferenceCollective>(ReferenceCollective{
          MpiReference::functionName(collective) + " of " + mpi->libraryName(),
          [&mpi, &collective](const Call& call) { mpi->run(collective, call); }});
    }
#endif
    wrong += runSweep(comm, options, collective, reference.get(), report);
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  ParseResult parsed = parseOptions(argc, argv);
  if (!parsed.options) {
    return parsed.exitCode;
  }
  const BenchOptions& options = *parsed.options;
  int rank = -1;
  // Every chorus call here is waited for at once: run each on this thread (no hand-off to the
  // communicator's worker thread), as a blocking program would.
  chorus::BlockingCalls blocking;
  try {
    if (options.compareMpi && std::getenv("CHORUS_BACKEND") == nullptr) {
      chorus::DistContext::get().setDefaultBackend(kCompareMpiDefaultBackend);
    }
    auto comm = chorus::DistContext::get().communicator();
    rank = comm->rank();
#ifdef CHORUS_WITH_NCCL
    if (options.onDevice) {
      const chorus::DistConfig& config = chorus::DistContext::get().config();
      useLocalGpu(rank, config.localRank, config.localSize);
    }
#endif
    if (options.root >= comm->size()) {
      if (rank == 0) {
        std::fprintf(stderr, "chorus-bench: --root %d is not a rank of this job of %d ranks\n",
                     options.root, comm->size());
      }
      return 2;
    }
    std::unique_ptr<Report> report;
    if (!makeReport(*comm, options, report)) {
      return 2;
    }
    if (!options.tracePath.empty())
      chorus::DistContext::get().startTrace(options.tracePath);
    int64_t wrong = runSweeps(*comm, options, report.get());
    if (!options.tracePath.empty()) {
      chorus::trace::stop();
      comm->barrier()->wait();  // every part is written
      if (rank == 0)
        chorus::trace::merge(options.tracePath);
    }
    report.reset();
    chorus::DistContext::get().shutdown();
    return wrong > 0 ? 1 : 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "chorus-bench: rank %d (this process) failed: %s\n", rank, e.what());
    return 2;
  }
}
