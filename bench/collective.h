// The collectives chorus-bench can time, one row each in an explicit table (collective.cc).
//
// Each row says how nccl-tests sizes the collective (Shape), its bus-bandwidth factor, how to fill
// its buffers with a known pattern, how to issue one call, and how to count wrong elements against
// a closed form afterwards. "size" follows nccl-tests: for allgather, reduce_scatter, alltoall,
// gather and scatter it is the bytes of the full (gathered) buffer, and "count" is the elements of
// one rank's chunk; for allreduce, broadcast and reduce both describe the whole buffer.
//
// busbw = algbw * factor, the factors of nccl-tests' PERFORMANCE.md: allreduce 2(n-1)/n;
// reduce_scatter, allgather, alltoall, gather and scatter (n-1)/n; broadcast and reduce 1.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "chorus/communicator.h"
#include "chorus/tensor.h"
#include "chorus/types.h"

namespace chorus::bench {

// The geometry of one row of the sweep.
struct Shape {
  int64_t count = 0;     // nccl-tests' "count" (elements per rank chunk for the gathering ops)
  int64_t inElems = 0;   // elements of the input buffer (0: the op works in place on `out`)
  int64_t outElems = 0;  // elements of the output buffer
  int64_t bytes = 0;     // nccl-tests' "size"
};

// Everything one call needs. The buffers are owned by the sweep and hold at least the elements
// that `shape` asks for.
struct Call {
  Communicator* comm = nullptr;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Shape shape;
  void* in = nullptr;
  void* out = nullptr;
  Device device = Device::cpu();  // where in and out are (issue() only; fill and check see host)

  int rank() const { return comm->rank(); }
  int ranks() const { return comm->size(); }
};

struct Collective {
  std::string_view name;
  // True when --reduce-op applies.
  bool reduces;
  // True when --root applies.
  bool rooted;
  // False for barrier, which moves no data: it gets one row of size 0.
  bool sweeps;
  double (*busBwFactor)(int ranks);
  // The row for a requested size in bytes (rounded down to whole elements per chunk, as
  // nccl-tests).
  Shape (*shape)(int64_t bytes, size_t elementSize, int ranks);
  // Writes the check pattern into the buffers this rank contributes (and the ones it receives).
  void (*fill)(const Call& call);
  Communicator::WorkPtr (*issue)(const Call& call);
  // Elements on this rank that differ from the closed form, after fill() and one issue()->wait().
  int64_t (*countWrong)(const Call& call);
  // No CUDA form (alltoallv): --device cuda refuses it, and its `--op all` leaves it out.
  bool hostOnly = false;
};

// Every collective, in the order `--op all` runs them.
std::span<const Collective* const> allCollectives();
// The row named `name` (accepting "all_to_all", "reducescatter" and "all_gather" as aliases), or
// nullptr.
const Collective* findCollective(std::string_view name);

// The rows, defined in reducing_collectives.cc and moving_collectives.cc.
extern const Collective kAllreduce;
extern const Collective kReduceScatter;
extern const Collective kReduce;
extern const Collective kAllgather;
extern const Collective kBroadcast;
extern const Collective kAlltoall;
extern const Collective kGather;
extern const Collective kScatter;
extern const Collective kBarrier;

}  // namespace chorus::bench
