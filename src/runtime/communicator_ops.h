// Helpers shared by the Communicator front-end files (src/runtime/communicator*.cc).
#pragma once

#include <optional>
#include <string_view>

#include "backend/backend.h"
#include "chorus/types.h"
#include "core/collective.h"

namespace chorus::detail {

Fingerprint makeFingerprint(Collective collective,
                            size_t count,
                            std::optional<DataType> dtype,
                            std::optional<ReduceOp> op,
                            int root);
void checkReduction(ReduceOp op, DataType dtype, std::string_view opName, int rank);
void checkRoot(int root, int size, std::string_view opName, int rank);
// float32 for float16/bfloat16 (one rounding at the end), else the dtype itself.
DataType accumulationType(DataType dtype);
// The type `backend` reduces a `dtype` tensor in for `op`: the dtype itself when the backend
// accumulates half types in float32 itself (Backend::reducesHalfTypes), except for avg, whose
// division must come before the one rounding too; otherwise accumulationType(dtype).
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
