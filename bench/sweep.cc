// One sweep of chorus-bench (see sweep.h).
//
// Per size: fill the buffers with the check pattern, run `warmup` untimed iterations, then
// `repeats` timed loops of `iters` blocking calls (both scaled down above 16 MiB); the reported
// time is the median over all timed iterations of the slowest rank's time (timing.h). With a
// reference, both implementations warm up and their timed loops alternate. With --check, the
// buffers are filled again, one more call runs, and the wrong elements of every rank are summed
// with an int64 allreduce (for the reference too, refilled first). Buffers are sized for the
// largest row and pre-faulted once.
#include "sweep.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "buffer.h"
#include "timing.h"

namespace chorus::bench {

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

namespace {

// Times one row: chorus first, then the reference when there is one. Returns the medians.
std::vector<double> timeRow(Communicator& comm,
                            const BenchOptions& options,
                            const Collective& collective,
                            const ReferenceCollective* reference,
                            const Call& call) {
  TimingPlan plan;
  plan.iters = scaledIterations(options.iters, call.shape.bytes, 2);
  plan.warmup = scaledIterations(options.warmup, call.shape.bytes, 1);
  plan.repeats = options.repeats;
  collective.fill(call);
  std::vector<std::function<void()>> loops = {[&] { collective.issue(call)->wait(); }};
  if (reference != nullptr) {
    loops.emplace_back([&] { reference->run(call); });
  }
  return measureInterleavedMedians(comm, plan, loops);
}

// Fills, runs `once`, and returns the wrong elements summed over all ranks.
int64_t checkRow(Communicator& comm,
                 const Collective& collective,
                 const Call& call,
                 const std::function<void()>& once) {
  collective.fill(call);
  once();
  int64_t wrong = collective.countWrong(call);
  comm.allreduce(Tensor(&wrong, {1}), ReduceOp::kSum)->wait();
  return wrong;
}

}  // namespace

int64_t runSweep(Communicator& comm,
                 const BenchOptions& options,
                 const Collective& collective,
                 const ReferenceCollective* reference,
                 Report* report) {
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

  if (report != nullptr) {
    report->beginTable({&collective, comm.size(), comm.backendName(),
                        reference != nullptr ? reference->description : ""});
  }
  const double factor = collective.busBwFactor(comm.size());
  int64_t totalWrong = 0;
  for (const Shape& shape : shapes) {
    Call call{&comm, options.dtype, options.reduceOp, options.root, shape, in.data(), out.data()};
    const std::vector<double> seconds = timeRow(comm, options, collective, reference, call);
    Measurement chorus = measurementOf(seconds[0], shape, factor);
    std::optional<Measurement> mpi;
    if (options.check) {
      chorus.wrong = checkRow(comm, collective, call, [&] { collective.issue(call)->wait(); });
    }
    if (reference != nullptr) {
      mpi = measurementOf(seconds[1], shape, factor);
      if (options.check) {
        mpi->wrong = checkRow(comm, collective, call, [&] { reference->run(call); });
      }
      totalWrong += mpi->wrong;
    }
    totalWrong += chorus.wrong;
    if (report != nullptr) {
      report->row(shape, chorus, mpi);
    }
  }
  if (report != nullptr) {
    report->endTable();
  }
  return totalWrong;
}

}  // namespace chorus::bench
