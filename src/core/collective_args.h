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
#include <span>

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

// all_to_all with a block size per pair: the block for rank i is sendBytes[i] bytes at
// sendOffsets[i] of input, the block from rank i lands in recvBytes[i] bytes at recvOffsets[i] of
// output (each span has size() entries). The front end packs the blocks in rank order, but a
// backend reads only these (an allgather_v sends its whole input to every rank: every send block
// is at offset 0). Whether sendBytes[i] on this rank equals recvBytes[me] on rank i is the
// backend's to check, on every rank (Backend::allToAllV).
struct AllToAllVArgs {
  const void* input;
  void* output;  // never overlaps input
  std::span<const size_t> sendBytes;
  std::span<const size_t> sendOffsets;
  std::span<const size_t> recvBytes;
  std::span<const size_t> recvOffsets;
};

struct BarrierArgs {};

// For engines that work in place: copies `bytes` of input into output unless they are one buffer
// (overlap allowed).
inline void copyToOutput(const void* input, void* output, size_t bytes) {
  if (input != output && bytes != 0)
    std::memmove(output, input, bytes);
}

}  // namespace chorus
