// The arguments of each collective as backends and algorithms see them: flat, contiguous buffers
// of one dtype, already validated by the communicator front end (src/runtime/). Every collective
// names its input and its output; allreduce and broadcast run in place when they are the same
// buffer.
//
// Conventions: counts are in elements, `bytes` in bytes. An input is never modified unless it is
// also the output. ReduceOp is kAvg only where the backend said it averages itself
// (Backend::allreduceAverages; otherwise the front end sums and divides), and float16 / bfloat16
// reductions arrive already widened to float32 when the front end wants a single rounding.
#pragma once

#include <cstddef>
#include <cstring>

#include "chorus/types.h"

namespace chorus {

struct AllreduceArgs {
  const void* input;  // count elements; may be output (in place)
  void* output;       // count elements: the reduction over every rank
  size_t count;
  DataType dtype;
  ReduceOp op;

  bool inPlace() const { return input == output; }
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
  const void* input;  // bytes on root; ignored elsewhere; may be output (in place)
  void* output;       // bytes: the root's input, on every rank (the root's too)
  size_t bytes;
  int root;

  bool inPlace() const { return input == output; }
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

// For engines that work in place: copies `bytes` of input into output unless they are one buffer
// (overlap allowed).
inline void copyToOutput(const void* input, void* output, size_t bytes) {
  if (input != output && bytes != 0)
    std::memmove(output, input, bytes);
}

}  // namespace chorus
