// Element-wise reduction kernels, dispatched on (ReduceOp, DataType) in one place.
//
// All loops are written to vectorize (restrict pointers, no branches in the body) and are compiled
// for several x86-64 levels with runtime selection. float16 and bfloat16 are widened to float32,
// combined, and rounded once (round to nearest even) when written back. kAvg combines like kSum;
// the division happens once at the end (divideBy). Bitwise ops on floats and avg on bool are
// InvalidArgumentError (see isValidReduction). bool: sum/max/bor are "or", prod/min/band "and",
// bxor "xor"; results are 0 or 1. Float min and max propagate NaN (a NaN operand gives NaN).
// complex64/complex128 take sum, prod (the textbook product, as NumPy's) and avg only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "chorus/types.h"

namespace chorus::kernels {

// dst[i] = dst[i] op src[i]. dst and src may be the same buffer, not partially overlapping.
void reduceInto(ReduceOp op, DataType dtype, void* dst, const void* src, size_t count);
// dst[i] = srcs[0][i] op srcs[1][i] op ... (at least one source). float16/bfloat16 accumulate
// across all sources in float32 and round once. dst may alias srcs[0].
void reduceMany(
    ReduceOp op, DataType dtype, void* dst, std::span<const void* const> srcs, size_t count);
// data[i] /= divisor, for avg. Integers truncate toward zero; half types round once.
void divideBy(DataType dtype, void* data, size_t count, int64_t divisor);
// float16 / bfloat16 <-> float32 (any other dtype is InvalidArgumentError).
void widenToFloat32(DataType dtype, const void* src, float* dst, size_t count);
void narrowFromFloat32(DataType dtype, const float* src, void* dst, size_t count);
// int8 / uint8 / int16 / uint16 / int32 / uint32 <-> int64, for an average summed in int64 (any
// other dtype is InvalidArgumentError). Narrowing assumes the values fit, as an average of them
// does.
void widenToInt64(DataType dtype, const void* src, int64_t* dst, size_t count);
void narrowFromInt64(DataType dtype, const int64_t* src, void* dst, size_t count);

}  // namespace chorus::kernels
