// The arguments of each collective as algorithms and backends see them: flat, contiguous buffers of
// one dtype, already validated by the communicator front end (src/runtime/).
//
// Conventions: counts are in elements, `bytes` in bytes. Inputs are never modified unless the
// collective is in place (allreduce, broadcast). ReduceOp is never kAvg here (the front end sums
// and divides), and float16 / bfloat16 reductions arrive already widened to float32 when the front
// end wants a single rounding.
#pragma once

#include <cstddef>

#include "chorus/types.h"

namespace chorus::algorithms {

struct AllreduceArgs {
  void* data;  // in place
  size_t count;
  DataType dtype;
  ReduceOp op;
};

struct ReduceScatterArgs {
  const void* input;  // size * countPerRank elements, rank-major chunks
  void* output;       // countPerRank elements: the reduction of chunk `rank`
  size_t countPerRank;
  DataType dtype;
  ReduceOp op;
};

struct AllgatherArgs {
  const void* input;  // bytesPerRank; may alias output + rank * bytesPerRank
  void* output;       // size * bytesPerRank, rank-major
  size_t bytesPerRank;
};

struct BroadcastArgs {
  void* data;
  size_t bytes;
  int root;
};

struct ReduceArgs {
  const void* input;  // count elements; not modified
  void* output;       // count elements on root; untouched elsewhere (may be null there)
  size_t count;
  DataType dtype;
  ReduceOp op;
  int root;
};

struct GatherArgs {
  const void* input;  // bytesPerRank
  void* output;       // size * bytesPerRank on root, rank-major; untouched elsewhere
  size_t bytesPerRank;
  int root;
};

struct ScatterArgs {
  const void* input;  // size * bytesPerRank on root, rank-major; ignored elsewhere
  void* output;       // bytesPerRank
  size_t bytesPerRank;
  int root;
};

struct AllToAllArgs {
  const void* input;  // size * bytesPerRank: block i goes to rank i
  void* output;       // size * bytesPerRank: block i came from rank i
  size_t bytesPerRank;
};

struct BarrierArgs {};

}  // namespace chorus::algorithms
