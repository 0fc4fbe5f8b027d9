// One sweep of chorus-bench (see sweep.h).
//
// Per size: fill the buffers with the check pattern, run `warmup` untimed iterations, then
// `repeats` timed loops of `iters` blocking calls (both scaled down above 16 MiB); the reported
// time is the median over all timed iterations of the slowest rank's time (timing.h). With
// --check, the buffers are filled again, one more call runs, and the wrong elements of every rank
// are summed with an int64 allreduce. Buffers are sized for the largest row and pre-faulted once.
#include "sweep.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "buffer.h"
#include "timing.h"

namespace chorus::bench {
namespace {

// The rows to run: sizes min, min*factor, ... <= max, as the collective rounds them, skipping
// sizes that round to nothing or to the previous row.
std::vector<Shape> plannedShapes(const BenchOptions& options,
                                 const Collective& collective,
                                 int ranks) {
  if (!collective.sweeps) {
    return {Shape{}};
  }
  std::vector<Shape> shapes;
  const size_t elementSize = dataTypeSize(options.dtype);
  for (int64_t bytes = options.minBytes; bytes <= options.maxBytes; bytes *= options.factor) {
    Shape shape = collective.shape(bytes, elementSize, ranks);
    if (shape.bytes > 0 && (shapes.empty() || shapes.back().bytes != shape.bytes)) {
      shapes.push_back(shape);
    }
  }
  return shapes;
}

std::string describeBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

void printHeader(const Communicator& comm, const BenchOptions& options, const Collective& c) {
  std::printf("# chorus-bench: %s, %d ranks, dtype %s", std::string(c.name).c_str(), comm.size(),
              std::string(toString(options.dtype)).c_str());
  if (c.reduces) {
    std::printf(", reduce-op %s", std::string(toString(options.reduceOp)).c_str());
  }
  if (c.rooted) {
    std::printf(", root %d", options.root);
  }
  std::printf(", backend %s\n", comm.backendName().c_str());
  if (c.sweeps) {
    std::printf("# sizes %s .. %s (x%lld), ", describeBytes(options.minBytes).c_str(),
                describeBytes(options.maxBytes).c_str(), static_cast<long long>(options.factor));
  } else {
    std::printf("# ");
  }
  std::printf("iters %d (fewer above 16 MiB), warmup %d, repeats %d, check %s\n", options.iters,
              options.warmup, options.repeats, options.check ? "on" : "off");
  std::printf("#\n# %10s %12s %12s %12s %12s %8s\n", "size", "count", "time", "algbw", "busbw",
              "#wrong");
  std::printf("# %10s %12s %12s %12s %12s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)");
  std::fflush(stdout);
}

// Runs one row; returns the median seconds.
double timeRow(Communicator& comm,
               const BenchOptions& options,
               const Collective& collective,
               const Call& call) {
  TimingPlan plan;
  plan.iters = scaledIterations(options.iters, call.shape.bytes, 2);
  plan.warmup = scaledIterations(options.warmup, call.shape.bytes, 1);
  plan.repeats = options.repeats;
  collective.fill(call);
  return measureMedianSeconds(comm, plan, [&] { collective.issue(call)->wait(); });
}

// Fills, runs once more, and returns the wrong elements summed over all ranks.
int64_t checkRow(Communicator& comm, const Collective& collective, const Call& call) {
  collective.fill(call);
  collective.issue(call)->wait();
  int64_t wrong = collective.countWrong(call);
  comm.allreduce(Tensor(&wrong, {1}), ReduceOp::kSum)->wait();
  return wrong;
}

}  // namespace

int64_t runSweep(Communicator& comm, const BenchOptions& options, const Collective& collective) {
  const std::vector<Shape> shapes = plannedShapes(options, collective, comm.size());
  const size_t elementSize = dataTypeSize(options.dtype);
  int64_t maxIn = 0;
  int64_t maxOut = 0;
  for (const Shape& shape : shapes) {
    maxIn = std::max(maxIn, shape.inElems);
    maxOut = std::max(maxOut, shape.outElems);
  }
  Buffer in(static_cast<size_t>(maxIn) * elementSize);
  Buffer out(static_cast<size_t>(maxOut) * elementSize);

  const bool printing = comm.rank() == 0;
  if (printing) {
    printHeader(comm, options, collective);
  }
  int64_t totalWrong = 0;
  double busBwSum = 0.0;
  for (const Shape& shape : shapes) {
    Call call{&comm, options.dtype, options.reduceOp, options.root, shape, in.data(), out.data()};
    double seconds = timeRow(comm, options, collective, call);
    int64_t wrong = options.check ? checkRow(comm, collective, call) : 0;
    totalWrong += wrong;
    double algBw = seconds > 0.0 ? static_cast<double>(shape.bytes) / seconds / 1e9 : 0.0;
    double busBw = algBw * collective.busBwFactor(comm.size());
    busBwSum += busBw;
    if (printing) {
      std::string wrongText = options.check ? std::to_string(wrong) : "N/A";
      std::printf("  %10lld %12lld %12.1f %12.4f %12.4f %8s\n", static_cast<long long>(shape.bytes),
                  static_cast<long long>(shape.count), seconds * 1e6, algBw, busBw,
                  wrongText.c_str());
      std::fflush(stdout);
    }
  }
  if (printing) {
    std::printf("# wrong elements: %lld\n", static_cast<long long>(totalWrong));
    if (collective.sweeps && !shapes.empty()) {
      std::printf("# avg bus bandwidth: %.4f GB/s\n",
                  busBwSum / static_cast<double>(shapes.size()));
    }
    std::printf("#\n");
    std::fflush(stdout);
  }
  return totalWrong;
}

}  // namespace chorus::bench
