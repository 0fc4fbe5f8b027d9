// Ring allreduce = ring reduce-scatter + ring allgather, in place, over one uneven partition.
//
// What it does: the vector (count elements) is cut into p chunks whose sizes differ by at most
// one element (patterns/partition.h), so any count works, including counts below p and 0.
//
//   1. Reduce-scatter (reduce_scatter_ring.cc): p-1 steps around the ring; each chunk collects
//      every rank's contribution on its way, and rank r ends holding the reduced chunk r, in place.
//      Incoming segments land in a few scratch slots and are reduced into the data; the receive
//      for the next segment is posted before the current one is reduced.
//   2. Allgather (allgather_ring.cc): p-1 more steps; the reduced chunks travel around the ring
//      and land in place, so every rank ends with the whole reduced vector.
//
// Both phases pipeline segments of about 256 KiB (Peers::segmentBytes()). Every chunk is
// reduced by exactly one rank and copied to the others, so all ranks get bit-identical results.
//
// Cost per rank: 2(p-1) steps; sends and receives 2(p-1)/p * count elements; reduces
// (p-1)/p * count elements. Bandwidth-optimal for large vectors; for small ones the 2(p-1)
// latencies dominate, which is why the table prefers recursive doubling below 64 KiB.
//
// Limits: any p, any count. Scratch: kStreamWindow segments (1 MiB at the default segment size).
#include "algorithms/implementations.h"
#include "algorithms/ring_phases.h"
#include "algorithms/stream.h"

namespace chorus::algorithms {

void allreduceRing(Peers& peers, const AllreduceArgs& args) {
  const int size = peers.size();
  if (size == 1)
    return;
  const size_t elementSize = dataTypeSize(args.dtype);
  const patterns::RingLayout layout{args.count, size};
  void* slots =
      peers.scratch(kStreamWindow * ringSlotBytes(layout, elementSize, peers.segmentBytes()));
  void* ownChunk = blockAt(args.output, layout.chunk(peers.rank()), elementSize);
  ringReduceScatterPhase(peers, layout, args.dtype, args.op,
                         RingReduceScatterBuffers{args.output, args.output, ownChunk, slots});
  ringAllgatherPhase(peers, layout, elementSize, args.output, /*noteHeardFromAll=*/false);
}

}  // namespace chorus::algorithms
