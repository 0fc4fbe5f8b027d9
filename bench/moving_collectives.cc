// The data-moving collectives of chorus-bench: allgather, broadcast, alltoall, gather, scatter, and
// barrier (which moves nothing and gets one row of size 0).
//
// Rank r's element j of the buffer it sends is movedValue(r, j) (patterns.h), so every received
// element names its source rank and position and must arrive bit for bit. Receive buffers start
// with a value the collective must overwrite (movedValue of another rank, or 0 for gathers).
#include <cstdint>
#include <utility>

#include "collective.h"
#include "patterns.h"

namespace chorus::bench {
namespace {

Tensor view(const Call& call, void* data, int64_t elements) {
  return Tensor(data, call.dtype, {elements}, call.device);
}

double chunkFactor(int ranks) { return static_cast<double>(ranks - 1) / ranks; }
double unitFactor(int) { return 1.0; }

// One chunk of `count` elements per rank; in = one chunk, out = ranks chunks (allgather, gather).
Shape gatheringShape(int64_t bytes, size_t elementSize, int ranks) {
  int64_t count = bytes / (static_cast<int64_t>(elementSize) * ranks);
  return {count, count, count * ranks, count * ranks * static_cast<int64_t>(elementSize)};
}
// in = ranks chunks, out = one chunk (scatter).
Shape scatteringShape(int64_t bytes, size_t elementSize, int ranks) {
  Shape shape = gatheringShape(bytes, elementSize, ranks);
  std::swap(shape.inElems, shape.outElems);
  return shape;
}
// in = out = ranks chunks (alltoall).
Shape exchangingShape(int64_t bytes, size_t elementSize, int ranks) {
  Shape shape = gatheringShape(bytes, elementSize, ranks);
  shape.inElems = shape.outElems;
  return shape;
}
// The whole buffer, in place (broadcast).
Shape wholeBufferShape(int64_t bytes, size_t elementSize, int) {
  int64_t count = bytes / static_cast<int64_t>(elementSize);
  return {count, 0, count, count * static_cast<int64_t>(elementSize)};
}

void fillOwn(const Call& call, void* data, int64_t elements) {
  fillBuffer(call.dtype, data, elements, [&](int64_t j) { return movedValue(call.rank(), j); });
}
void fillZero(const Call& call, void* data, int64_t elements) {
  fillBuffer(call.dtype, data, elements, [](int64_t) { return 0.0; });
}

// Output chunk s, element k, holds source s's element k (allgather, gather).
int64_t countWrongGathered(const Call& call) {
  const int64_t count = call.shape.count;
  return countMismatches(call.dtype, call.out, call.shape.outElems, [&](int64_t i) {
    return movedValue(static_cast<int>(i / count), i % count);
  });
}

// allgather
void fillAllgather(const Call& call) {
  fillOwn(call, call.in, call.shape.inElems);
  fillZero(call, call.out, call.shape.outElems);
}
Communicator::WorkPtr issueAllgather(const Call& call) {
  return call.comm->allgather(view(call, call.in, call.shape.inElems),
                              view(call, call.out, call.shape.outElems));
}

// broadcast: every rank fills its own pattern; afterwards all hold the root's.
void fillBroadcast(const Call& call) { fillOwn(call, call.out, call.shape.outElems); }
Communicator::WorkPtr issueBroadcast(const Call& call) {
  return call.comm->broadcast(view(call, call.out, call.shape.outElems), call.root);
}
int64_t countWrongBroadcast(const Call& call) {
  return countMismatches(call.dtype, call.out, call.shape.outElems,
                         [&](int64_t j) { return movedValue(call.root, j); });
}

// alltoall: chunk s of rank r's input goes to rank s; output chunk s comes from rank s.
void fillAlltoall(const Call& call) { fillAllgather(call); }
Communicator::WorkPtr issueAlltoall(const Call& call) {
  return call.comm->allToAll(view(call, call.in, call.shape.inElems),
                             view(call, call.out, call.shape.outElems));
}
int64_t countWrongAlltoall(const Call& call) {
  const int64_t count = call.shape.count;
  const int64_t myChunk = call.rank() * count;
  return countMismatches(call.dtype, call.out, call.shape.outElems, [&](int64_t i) {
    return movedValue(static_cast<int>(i / count), myChunk + i % count);
  });
}

// gather: the output is passed on every rank (chorus ignores it off the root) and checked on the
// root only.
Communicator::WorkPtr issueGather(const Call& call) {
  return call.comm->gather(view(call, call.in, call.shape.inElems),
                           view(call, call.out, call.shape.outElems), call.root);
}
int64_t countWrongGather(const Call& call) {
  return call.rank() == call.root ? countWrongGathered(call) : 0;
}

// scatter: the root's input chunk r (its pattern at r * count + k) lands in rank r's output.
void fillScatter(const Call& call) {
  fillOwn(call, call.in, call.shape.inElems);
  fillZero(call, call.out, call.shape.outElems);
}
Communicator::WorkPtr issueScatter(const Call& call) {
  return call.comm->scatter(view(call, call.in, call.shape.inElems),
                            view(call, call.out, call.shape.outElems), call.root);
}
int64_t countWrongScatter(const Call& call) {
  const int64_t offset = call.rank() * call.shape.count;
  return countMismatches(call.dtype, call.out, call.shape.outElems,
                         [&](int64_t k) { return movedValue(call.root, offset + k); });
}

// barrier
Shape barrierShape(int64_t, size_t, int) { return {}; }
void fillNothing(const Call&) {}
Communicator::WorkPtr issueBarrier(const Call& call) { return call.comm->barrier(); }
int64_t countWrongNothing(const Call&) { return 0; }

}  // namespace

const Collective kAllgather = {.name = "allgather",
                               .reduces = false,
                               .rooted = false,
                               .sweeps = true,
                               .busBwFactor = chunkFactor,
                               .shape = gatheringShape,
                               .fill = fillAllgather,
                               .issue = issueAllgather,
                               .countWrong = countWrongGathered};
const Collective kBroadcast = {.name = "broadcast",
                               .reduces = false,
                               .rooted = true,
                               .sweeps = true,
                               .busBwFactor = unitFactor,
                               .shape = wholeBufferShape,
                               .fill = fillBroadcast,
                               .issue = issueBroadcast,
                               .countWrong = countWrongBroadcast};
const Collective kAlltoall = {.name = "alltoall",
                              .reduces = false,
                              .rooted = false,
                              .sweeps = true,
                              .busBwFactor = chunkFactor,
                              .shape = exchangingShape,
                              .fill = fillAlltoall,
                              .issue = issueAlltoall,
                              .countWrong = countWrongAlltoall};
const Collective kGather = {.name = "gather",
                            .reduces = false,
                            .rooted = true,
                            .sweeps = true,
                            .busBwFactor = chunkFactor,
                            .shape = gatheringShape,
                            .fill = fillAllgather,
                            .issue = issueGather,
                            .countWrong = countWrongGather};
const Collective kScatter = {.name = "scatter",
                             .reduces = false,
                             .rooted = true,
                             .sweeps = true,
                             .busBwFactor = chunkFactor,
                             .shape = scatteringShape,
                             .fill = fillScatter,
                             .issue = issueScatter,
                             .countWrong = countWrongScatter};
const Collective kBarrier = {.name = "barrier",
                             .reduces = false,
                             .rooted = false,
                             .sweeps = false,
                             .busBwFactor = unitFactor,
                             .shape = barrierShape,
                             .fill = fillNothing,
                             .issue = issueBarrier,
                             .countWrong = countWrongNothing};

}  // namespace chorus::bench
