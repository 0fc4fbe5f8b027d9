// chorus-bench's command line, in the spirit of nccl-tests' `-b 8 -e 256M -f 2 -n 20 -w 5 -c 1`.
//
//   chorus-bench --op allreduce,allgather --min 8 --max 256M --dtype float32 --check --repeats 3
//   mpirun -np 2 chorus-bench --compare mpi --op allreduce --csv allreduce.csv
//
// Sizes take K, M and G suffixes (powers of 1024, an optional "B" or "iB" after them). --op takes a
// comma list or "all". Validation that needs the communicator (root < ranks) happens in main.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/types.h"

namespace chorus::bench {

struct BenchOptions {
  // Collective names, in the order they run (see collective.h for the spellings).
  std::vector<std::string> ops;
  int64_t minBytes = 8;
  int64_t maxBytes = 256 << 20;
  int64_t factor = 2;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduceOp = ReduceOp::kSum;
  // Timed iterations per size (scaled down above kFullIterationsBytes) and untimed warm-up ones.
  int iters = 20;
  int warmup = 5;
  // How many times the timed loop runs per size; the reported time is the median over all of them.
  int repeats = 3;
  int root = 0;
  bool check = false;
  // --compare mpi: also time the MPI library's own collectives (only in builds with
  // CHORUS_WITH_MPI, under mpirun; see mpi_reference.h).
  bool compareMpi = false;
  // --device cuda: the buffers are on this rank's GPU (local rank modulo the GPUs it sees), the
  // collectives run on the nccl backend, and time is measured with CUDA events (device_bench.h).
  bool onDevice = false;
  // --compare nccl (with --device cuda): also time raw NCCL on the same buffers.
  bool compareNccl = false;
  // --csv: rank 0 writes every row there as well (report.h); empty for none.
  std::string csvPath;
  // --trace: record a timeline of the sweeps (chorus/trace.h), merged by rank 0 into this file;
  // empty for none. For measuring what recording costs (docs/observability.md).
  std::string tracePath;
};

// The backend --compare mpi gives chorus when CHORUS_BACKEND is not set: the shared-memory backend
// (the "mpi" backend would run MPI's collectives, comparing MPI with itself).
inline constexpr const char* kCompareMpiDefaultBackend = "shm";

// Parses "4096", "4K", "256M", "1G", "64KiB", "2MB"; throws std::invalid_argument on anything else.
int64_t parseByteSize(std::string_view text);

// Parses argv. Returns the options, or the exit code when chorus-bench should exit at once: 0 after
// --help, 2 after a usage error (the message is already printed to stderr).
struct ParseResult {
  std::optional<BenchOptions> options;
  int exitCode = 0;
};
ParseResult parseOptions(int argc, const char* const* argv);

}  // namespace chorus::bench
