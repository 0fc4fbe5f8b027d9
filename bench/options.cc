// Command-line parsing for chorus-bench (see options.h).
#include "options.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <sstream>
#include <stdexcept>

#include "chorus/error.h"
#include "collective.h"
#ifdef CHORUS_WITH_MPI
#include "mpi_reference.h"
#endif

namespace chorus::bench {
namespace {

constexpr const char* kFooter = R"(
Collectives: allreduce allgather reduce_scatter broadcast reduce alltoall alltoallv gather scatter
sendrecv (point-to-point: a ring shift, one message per rank) barrier
Sizes: bytes with an optional K, M or G suffix (powers of 1024), e.g. 8, 4K, 256M.
Output (rank 0): size (bytes, nccl-tests' notion: the full gathered buffer for allgather,
reduce_scatter, alltoall, gather, scatter), count (elements per rank chunk for those, else of the
buffer), time (us: median over iterations and repeats of the slowest rank's time), algbw
(GB/s = size / time), busbw (algbw times the nccl-tests factor), #wrong (with --check).
With --compare mpi (under mpirun, builds with MPI): the MPI library's own collective (MPI_Allreduce,
MPI_Allgather, ...) is timed on the same buffers, its loops alternating with chorus's, and four
columns follow: mpi time, mpi algbw, mpi busbw, mpi #wrong, and speedup = MPI time / chorus time
(above 1: chorus is faster). chorus runs the backend CHORUS_BACKEND names; when CHORUS_BACKEND is
not set, --compare mpi picks "shm" (chorus's shared-memory backend; mpirun gets a store for it),
since chorus's "mpi" backend would compare MPI with itself. float16, bfloat16 and avg have no MPI
counterpart and are refused with --compare mpi.
With --device cuda (builds with NCCL): the buffers are on the GPU (local rank modulo the GPUs),
chorus runs its nccl backend, and times come from CUDA events around each call; --compare nccl
adds raw NCCL (ncclAllReduce, ...) on the same buffers, as --compare mpi does for MPI.
Exit code: 0, or 1 if any element was wrong, 2 for a usage or communication error.

Examples:
  chorusrun -np 4 chorus-bench --op allreduce --min 8 --max 64M --check --repeats 3
  mpirun -np 2 chorus-bench --compare mpi --op allreduce --max 64M --check --csv allreduce.csv
  chorusrun -np 2 chorus-bench --device cuda --compare nccl --op all --max 256M --check)";

// The op list: a comma list of names, or "all" (on the GPU, every row with a CUDA form).
std::vector<std::string> expandOps(const std::vector<std::string>& given, bool onDevice) {
  std::vector<std::string> ops;
  for (const std::string& item : given) {
    std::stringstream stream(item);
    std::string name;
    while (std::getline(stream, name, ',')) {
      if (name.empty()) {
        continue;
      }
      if (name == "all") {
        for (const Collective* collective : allCollectives()) {
          if (!(onDevice && collective->hostOnly))
            ops.emplace_back(collective->name);
        }
        continue;
      }
      const Collective* collective = findCollective(name);
      if (collective == nullptr) {
        throw CLI::ValidationError("--op",
                                   "unknown collective '" + name +
                                       "'; use one of allreduce, allgather, "
                                       "reduce_scatter, broadcast, reduce, alltoall, "
                                       "alltoallv, gather, scatter, sendrecv, barrier, or all");
      }
      if (onDevice && collective->hostOnly) {
        throw CLI::ValidationError("--op", "'" + name +
                                               "' takes host buffers only (chorus refuses it "
                                               "on CUDA tensors): drop --device cuda");
      }
      ops.emplace_back(collective->name);
    }
  }
  return ops;
}

// Turns a parse error of a size or name into a CLI11 validation error naming the option.
template <typename Fn>
auto parseOrThrow(const std::string& option, const std::string& text, Fn&& parse) {
  try {
    return parse(text);
  } catch (const std::exception& e) {
    throw CLI::ValidationError(option, e.what());
  }
}

// The options parsed from text after CLI11 is done (sizes, names), with their defaults.
struct RawText {
  std::string ops = "allreduce";
  std::string minBytes = "8";
  std::string maxBytes = "256M";
  std::string dtype = "float32";
  std::string reduceOp = "sum";
  std::string compare;
  std::string device = "cpu";
};

void addOptions(CLI::App& app, BenchOptions& options, RawText& raw) {
  app.add_option("--op", raw.ops, "Collectives to time: a comma list, or all (default allreduce)");
  app.add_option("-b,--min", raw.minBytes, "Smallest size in bytes, K/M/G suffixes (default 8)");
  app.add_option("-e,--max", raw.maxBytes, "Largest size in bytes (default 256M)");
  app.add_option("-f,--factor", options.factor, "Size multiplier between rows (default 2)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("-d,--dtype", raw.dtype, "Element type, any chorus dtype name (default float32)");
  app.add_option("-o,--reduce-op", raw.reduceOp,
                 "sum prod min max avg band bor bxor (default sum)");
  app.add_option("-n,--iters", options.iters,
                 "Timed iterations per size (default 20; fewer above 16 MiB)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("-w,--warmup", options.warmup, "Untimed iterations per size (default 5)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--repeats", options.repeats,
                 "Timed loops per size; the median over all is reported (default 3)")
      ->check(CLI::Range(1, 1000));
  app.add_option("-r,--root", options.root, "Root rank of broadcast, reduce, gather, scatter")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("-c,--check", options.check, "Verify results against closed forms, count #wrong");
  app.add_option("--compare", raw.compare,
                 "mpi: also time the MPI library's collectives (under mpirun; CHORUS_BACKEND "
                 "defaults to shm then); nccl: raw NCCL on the same GPU buffers (--device cuda)")
      ->check(CLI::IsMember({"mpi", "nccl"}));
  app.add_option("--device", raw.device,
                 "cpu, or cuda: buffers on this rank's GPU, timed with CUDA events (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option(
      "--trace", options.tracePath,
      "Record a timeline of the timed calls into this Chrome trace file (rank 0 merges)");
  app.add_option("--csv", options.csvPath,
                 "Also write every row to this CSV file (rank 0), for bench/plot.py");
}

// --compare mpi: refuses builds without MPI and dtypes or ops MPI lacks.
void checkComparison(const BenchOptions& options) {
  if (!options.compareMpi) {
    return;
  }
#ifdef CHORUS_WITH_MPI
  bool reduces = false;
  for (const std::string& name : options.ops) {
    reduces = reduces || findCollective(name)->reduces;
  }
  std::string refusal = mpiComparisonRefusal(options.dtype, options.reduceOp, reduces);
  if (!refusal.empty()) {
    throw CLI::ValidationError("--compare", refusal);
  }
#else
  throw CLI::ValidationError(
      "--compare",
      "mpi: chorus was built without MPI (CHORUS_WITH_MPI is OFF); install an MPI "
      "library (libopenmpi-dev) and reconfigure with -DCHORUS_WITH_MPI=ON");
#endif
}

// Converts the text options and checks what CLI11 cannot (throws CLI::ValidationError).
void finishOptions(const RawText& raw, BenchOptions& options) {
  options.ops = expandOps({raw.ops}, raw.device == "cuda");
  options.minBytes = parseOrThrow("--min", raw.minBytes, parseByteSize);
  options.maxBytes = parseOrThrow("--max", raw.maxBytes, parseByteSize);
  options.dtype =
      parseOrThrow("--dtype", raw.dtype, [](const std::string& s) { return parseDataType(s); });
  options.reduceOp = parseOrThrow("--reduce-op", raw.reduceOp,
                                  [](const std::string& s) { return parseReduceOp(s); });
  options.compareMpi = raw.compare == "mpi";
  options.compareNccl = raw.compare == "nccl";
  options.onDevice = raw.device == "cuda";
  if (options.compareNccl && !options.onDevice)
    throw CLI::ValidationError("--compare", "nccl compares GPU buffers: add --device cuda");
  if (options.compareMpi && options.onDevice)
    throw CLI::ValidationError("--compare", "mpi times host buffers: drop --device cuda");
#ifndef CHORUS_WITH_NCCL
  if (options.onDevice) {
    throw CLI::ValidationError("--device",
                               "cuda needs a chorus-bench built with NCCL (CHORUS_WITH_NCCL)");
  }
#endif
  if (options.ops.empty()) {
    throw CLI::ValidationError("--op", "name at least one collective");
  }
  if (options.minBytes < 1 || options.minBytes > options.maxBytes) {
    throw CLI::ValidationError("--min", "need 1 <= --min <= --max");
  }
  for (const std::string& name : options.ops) {
    if (findCollective(name)->reduces && !isValidReduction(options.reduceOp, options.dtype)) {
      throw CLI::ValidationError(
          "--reduce-op",
          std::string(toString(options.reduceOp)) + " is not defined on " +
              std::string(toString(options.dtype)) +
              " (band, bor and bxor need an integer or bool dtype, avg a non-bool one)");
    }
  }
  checkComparison(options);
}

}  // namespace

int64_t parseByteSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 15) {
    throw std::invalid_argument("'" + std::string(text) +
                                "' is not a size; write e.g. 8, 4K, 256M");
  }
  int64_t value = std::stoll(std::string(text.substr(0, digits)));
  std::string suffix(text.substr(digits));
  for (char& c : suffix) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  int shift = -1;
  for (auto [unit, bits] : {std::pair{"", 0},
                            {"B", 0},
                            {"K", 10},
                            {"KB", 10},
                            {"KIB", 10},
                            {"M", 20},
                            {"MB", 20},
                            {"MIB", 20},
                            {"G", 30},
                            {"GB", 30},
                            {"GIB", 30}}) {
    if (suffix == unit) {
      shift = bits;
    }
  }
  if (shift < 0 || value > (int64_t{1} << (62 - shift))) {
    throw std::invalid_argument("'" + std::string(text) +
                                "' is not a size; write bytes with an optional K, M or G suffix");
  }
  return value << shift;
}

ParseResult parseOptions(int argc, const char* const* argv) {
  CLI::App app{"chorus-bench: time chorus collectives over a range of sizes (nccl-tests style)",
               "chorus-bench"};
  app.footer(kFooter);
  BenchOptions options;
  RawText raw;
  addOptions(app, options, raw);
  try {
    app.parse(argc, argv);
    finishOptions(raw, options);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return {std::nullopt, code == 0 ? 0 : 2};
  }
  return {std::move(options), 0};
}

}  // namespace chorus::bench
