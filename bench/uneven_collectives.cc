// chorus-bench's alltoallv: all_to_all with a block size per pair (Communicator::allToAllV; the
// MPI reference is MPI_Alltoallv).
//
// Rank r sends rank s unevenWeight(r, s) chunks of `count` elements (0, 1 or 2: some pairs send
// nothing, and ranks send different totals), packed in rank order; element j of rank r's input is
// movedValue(r, j) (patterns.h). As for alltoall, "size" is count * ranks elements (the mean bytes
// of a rank's input) and the buffers hold up to twice that.
#include "uneven_collectives.h"

#include "patterns.h"

namespace chorus::bench {
namespace {

Tensor rows(const Call& call, void* data, int64_t elements) {
  return Tensor(data, call.dtype, {elements}, call.device);
}

double chunkFactor(int ranks) { return static_cast<double>(ranks - 1) / ranks; }

Shape unevenShape(int64_t bytes, size_t elementSize, int ranks) {
  const int64_t count = bytes / (static_cast<int64_t>(elementSize) * ranks);
  return {count, 2 * count * ranks, 2 * count * ranks,
          count * ranks * static_cast<int64_t>(elementSize)};
}

void fillAlltoallv(const Call& call) {
  fillBuffer(call.dtype, call.in, call.shape.inElems,
             [&](int64_t j) { return movedValue(call.rank(), j); });
  fillBuffer(call.dtype, call.out, call.shape.outElems, [](int64_t) { return 0.0; });
}

Communicator::WorkPtr issueAlltoallv(const Call& call) {
  const UnevenSplits splits = unevenSplits(call);
  return call.comm->allToAllV(rows(call, call.in, splits.sendTotal), splits.send,
                              rows(call, call.out, splits.recvTotal), splits.recv);
}

// Element k of the block from rank s is s's element at the offset of this rank's block in s's
// input.
int64_t countWrongAlltoallv(const Call& call) {
  const UnevenSplits splits = unevenSplits(call);
  const int me = call.rank();
  std::vector<int64_t> firstOf(call.ranks() + 1, 0), offsetAtSource(call.ranks(), 0);
  for (int s = 0; s < call.ranks(); ++s) {
    firstOf[s + 1] = firstOf[s] + splits.recv[s];
    for (int t = 0; t < me; ++t) offsetAtSource[s] += unevenWeight(s, t) * call.shape.count;
  }
  return countMismatches(call.dtype, call.out, splits.recvTotal, [&](int64_t i) {
    int s = 0;
    while (i >= firstOf[s + 1]) ++s;
    return movedValue(s, offsetAtSource[s] + i - firstOf[s]);
  });
}

}  // namespace

int64_t unevenWeight(int from, int to) { return (from + 2 * to) % 3; }

UnevenSplits unevenSplits(const Call& call) {
  UnevenSplits splits;
  for (int peer = 0; peer < call.ranks(); ++peer) {
    splits.send.push_back(unevenWeight(call.rank(), peer) * call.shape.count);
    splits.recv.push_back(unevenWeight(peer, call.rank()) * call.shape.count);
    splits.sendTotal += splits.send.back();
    splits.recvTotal += splits.recv.back();
  }
  return splits;
}

const Collective kAlltoallv = {.name = "alltoallv",
                               .reduces = false,
                               .rooted = false,
                               .sweeps = true,
                               .busBwFactor = chunkFactor,
                               .shape = unevenShape,
                               .fill = fillAlltoallv,
                               .issue = issueAlltoallv,
                               .countWrong = countWrongAlltoallv,
                               .hostOnly = true};

}  // namespace chorus::bench
