// parallel/gradient_wire.h — float32 gradients to and from a half-precision wire dtype, as
// gradient compression (ZeroOptions::commDtype, and torch's bf16/fp16_compress_hook) sends them:
// each rank divides by the rank count and narrows, the ranks sum, and the sum is widened back.
//
// Contract: `wire` is bfloat16 or float16; the arithmetic is float32 with one rounding per
// narrowing (core/reduce_kernels.h). Both work a chunk of 64 KiB at a time through a private
// buffer, so they allocate (once per call) but never more than that. Thread-safe (pure functions).
#pragma once

#include <cstddef>

#include "chorus/types.h"

namespace chorus::parallel {

// Writes `values[i] / divisor` (float32 division) into `out` as `wire`.
void narrowDivided(DataType wire, const float* values, void* out, size_t count, int divisor);
// Adds the `count` `wire` values at `values`, widened to float32, into `into`.
void addWidened(DataType wire, const std::byte* values, float* into, size_t count);

}  // namespace chorus::parallel
