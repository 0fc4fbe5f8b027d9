// chorus's dtypes and reduce ops in NCCL's words: the one dispatch from DataType / ReduceOp to
// ncclDataType_t / ncclRedOp_t for the nccl backend.
//
// Every chorus dtype has an NCCL type (bool travels as uint8). Reductions follow the host
// backends' semantics (core/reduce_kernels): float16 and bfloat16 reduce natively in NCCL (it
// accumulates in float32 inside each step); bool sum/max are logical or and bool prod/min logical
// and, done as NCCL max/min on 0/1 bytes; avg is ncclAvg. NCCL has no bitwise reductions, so band,
// bor and bxor on integers, and bxor on bool, are UnsupportedError naming what to use instead.
// Pure functions; thread-safe.
#pragma once

#include <nccl.h>

#include "chorus/types.h"

namespace chorus::backend::nccl {

ncclDataType_t ncclTypeOf(DataType dtype);

// The NCCL op that computes `op` over `dtype`. UnsupportedError for the bitwise ops NCCL lacks,
// naming this process's `rank`; `op` must be valid for `dtype` (the front end checked it).
ncclRedOp_t ncclOpOf(ReduceOp op, DataType dtype, int rank);

}  // namespace chorus::backend::nccl
