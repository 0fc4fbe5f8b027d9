// chorus's dtypes and reduce ops in NCCL's words: the one dispatch from DataType / ReduceOp to
// ncclDataType_t / ncclRedOp_t for the nccl backend.
//
// Reductions follow the host backends' semantics (core/reduce_kernels): float16 and bfloat16
// reduce natively in NCCL (it accumulates in float32 inside each step); bool (travelling as uint8)
// sum/max are logical or and bool prod/min logical and, done as NCCL max/min on 0/1 bytes; avg is
// ncclAvg. NCCL has no complex type: complex64/complex128 sum and avg reduce their float parts one
// by one (ncclPartsPerElement), which is the same arithmetic. What NCCL cannot do is an
// UnsupportedError naming what to use instead: band, bor and bxor on integers and bxor on bool (no
// bitwise reductions), any reduction of int16/uint16 (no 16-bit integer type), and complex prod.
// Data movement does not come here: it moves bytes. Pure functions; thread-safe.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "chorus/types.h"

namespace chorus::backend::nccl {

// The NCCL type a reduction of `dtype` runs in (complex: its part's type); call after ncclOpOf
// accepted the reduction (int16 and uint16 have none: InternalError).
ncclDataType_t ncclTypeOf(DataType dtype);
// NCCL elements per chorus element: 2 for the complex types, else 1.
size_t ncclPartsPerElement(DataType dtype);

// The NCCL op that computes `op` over `dtype`. UnsupportedError for what NCCL lacks (above),
// naming this process's `rank`; `op` must be valid for `dtype` (the front end checked it).
ncclRedOp_t ncclOpOf(ReduceOp op, DataType dtype, int rank);

}  // namespace chorus::backend::nccl
