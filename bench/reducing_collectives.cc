// The reducing collectives of chorus-bench: allreduce, reduce_scatter and reduce.
//
// Rank r contributes reducedValue(op, dtype, r, i) at element i of the full buffer; the result at
// element i must be reducedExpected(op, dtype, ranks, i) (patterns.h). allreduce and reduce work in
// place on `out`; reduce also checks that non-root ranks' buffers were left untouched.
#include <cstdint>

#include "collective.h"
#include "patterns.h"

namespace chorus::bench {
namespace {

Tensor view(const Call& call, void* data, int64_t elements) {
  return Tensor(data, call.dtype, {elements}, call.device);
}

Shape wholeBufferShape(int64_t bytes, size_t elementSize, int ranks) {
  int64_t count = bytes / static_cast<int64_t>(elementSize);
  return {count, 0, count, count * static_cast<int64_t>(elementSize)};
}

// Fills `out` with this rank's contribution to the reduction of the whole buffer.
void fillContribution(const Call& call) {
  fillBuffer(call.dtype, call.out, call.shape.outElems,
             [&](int64_t i) { return reducedValue(call.op, call.dtype, call.rank(), i); });
}

int64_t countWrongReduction(const Call& call) {
  return countMismatches(call.dtype, call.out, call.shape.outElems, [&](int64_t i) {
    return reducedExpected(call.op, call.dtype, call.ranks(), i);
  });
}

// allreduce: in place on `out`; bus factor 2(n-1)/n (a reduce-scatter plus an allgather).
double allreduceFactor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

Communicator::WorkPtr issueAllreduce(const Call& call) {
  return call.comm->allreduce(view(call, call.out, call.shape.outElems), call.op);
}

// reduce_scatter: `in` holds ranks * count elements; chunk `rank` of the reduction lands in `out`.
double reduceScatterFactor(int ranks) { return static_cast<double>(ranks - 1) / ranks; }

Shape reduceScatterShape(int64_t bytes, size_t elementSize, int ranks) {
  int64_t count = bytes / (static_cast<int64_t>(elementSize) * ranks);
  return {count, count * ranks, count, count * ranks * static_cast<int64_t>(elementSize)};
}

void fillReduceScatter(const Call& call) {
  fillBuffer(call.dtype, call.in, call.shape.inElems,
             [&](int64_t i) { return reducedValue(call.op, call.dtype, call.rank(), i); });
  fillBuffer(call.dtype, call.out, call.shape.outElems, [](int64_t) { return 0.0; });
}

Communicator::WorkPtr issueReduceScatter(const Call& call) {
  return call.comm->reduceScatter(view(call, call.in, call.shape.inElems),
                                  view(call, call.out, call.shape.outElems), call.op);
}

int64_t countWrongReduceScatter(const Call& call) {
  const int64_t offset = call.rank() * call.shape.count;
  return countMismatches(call.dtype, call.out, call.shape.outElems, [&](int64_t i) {
    return reducedExpected(call.op, call.dtype, call.ranks(), offset + i);
  });
}

// reduce: in place on `out`, result on the root only; bus factor 1.
double reduceFactor(int) { return 1.0; }

Communicator::WorkPtr issueReduce(const Call& call) {
  return call.comm->reduce(view(call, call.out, call.shape.outElems), call.root, call.op);
}

int64_t countWrongReduce(const Call& call) {
  if (call.rank() == call.root) {
    return countWrongReduction(call);
  }
  return countMismatches(call.dtype, call.out, call.shape.outElems, [&](int64_t i) {
    return reducedValue(call.op, call.dtype, call.rank(), i);
  });
}

}  // namespace

const Collective kAllreduce = {.name = "allreduce",
                               .reduces = true,
                               .rooted = false,
                               .sweeps = true,
                               .busBwFactor = allreduceFactor,
                               .shape = wholeBufferShape,
                               .fill = fillContribution,
                               .issue = issueAllreduce,
                               .countWrong = countWrongReduction};
const Collective kReduceScatter = {.name = "reduce_scatter",
                                   .reduces = true,
                                   .rooted = false,
                                   .sweeps = true,
                                   .busBwFactor = reduceScatterFactor,
                                   .shape = reduceScatterShape,
                                   .fill = fillReduceScatter,
                                   .issue = issueReduceScatter,
                                   .countWrong = countWrongReduceScatter};
const Collective kReduce = {.name = "reduce",
                            .reduces = true,
                            .rooted = true,
                            .sweeps = true,
                            .busBwFactor = reduceFactor,
                            .shape = wholeBufferShape,
                            .fill = fillContribution,
                            .issue = issueReduce,
                            .countWrong = countWrongReduce};

}  // namespace chorus::bench
