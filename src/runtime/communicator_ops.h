// Helpers shared by the Communicator front-end files (src/runtime/communicator*.cc).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "chorus/tensor.h"
#include "chorus/types.h"
#include "core/collective.h"

namespace chorus::detail {

Fingerprint makeFingerprint(Collective collective,
                            size_t count,
                            std::optional<DataType> dtype,
                            std::optional<ReduceOp> op,
                            int root,
                            uint64_t shape = 0);
// Note [Shape signature]
// A collective's fingerprint carries a signature of what its tensors look like beyond their
// element count (Fingerprint::shape): a 64-bit hash of each tensor's number of dimensions and
// extents, then of the call's axes (normalized), a multiply per word, top bit cleared (the MPI
// backend's agreement negates the words), never 0 (0 is "no shape": send/recv, barrier). Each
// collective hashes what every rank must agree on: the input of a reduction, allgather, gather and
// all_to_all (with their axes), the output of a broadcast and a scatter (where non-roots' inputs
// are not read), every tensor of a fused allreduce. Cost: a few nanoseconds a call.
uint64_t shapeSignature(std::initializer_list<const Tensor*> tensors,
                        std::initializer_list<int64_t> axes = {});
uint64_t shapeSignature(const std::vector<Tensor>& tensors);
void checkReduction(ReduceOp op, DataType dtype, std::string_view opName, int rank);
void checkRoot(int root, int size, std::string_view opName, int rank);
// float32 for float16/bfloat16 (one rounding at the end), else the dtype itself.
DataType accumulationType(DataType dtype);
// Note [Integer averages]
// An average of an integer type narrower than 64 bits (int8, uint8, int16, uint16, int32, uint32)
// is summed in int64 and divided there, then narrowed: summed in its own type, (127 + 127) / 2 in
// int8 gave -1 (an audit found it; through torch.distributed too). int64 and uint64 have nothing
// wider: their sums must fit, as with NCCL's and MPI's sums (uint64 divides unsigned).
// The type `backend` reduces a `dtype` tensor in for `op`: int64 for an integer average (Note
// [Integer averages]); the dtype itself when the backend accumulates half types in float32
// itself (Backend::reducesHalfTypes), except for avg, whose division must come before the one
// rounding too; otherwise accumulationType(dtype).
DataType workType(const backend::Backend& backend, DataType dtype, ReduceOp op);
// avg travels as sum.
ReduceOp wireOp(ReduceOp op);
void finishAverage(ReduceOp op, DataType work, void* data, size_t count, int size);
// Copy count elements between a tensor of dtype `tensorType` and a buffer of `work` type,
// widening or narrowing when they differ.
void stageIn(DataType tensorType, DataType work, const void* source, void* to, size_t count);
void stageOut(
    DataType tensorType, DataType work, const void* source, void* destination, size_t count);

}  // namespace chorus::detail
