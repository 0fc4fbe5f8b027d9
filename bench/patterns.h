// The values chorus-bench writes before a checked call and the closed forms it compares against.
//
// Every value is a small integer, exact in every dtype (bfloat16 holds integers up to 256 exactly),
// so data-moving collectives are checked bit for bit and reductions against a fold over the ranks'
// values done here in double (float types) or int64 wrapped to the dtype (integer types). Only
// avg on float types can round; it is compared with a relative tolerance (toleranceFor).
//
// Dtypes are dispatched once, in visitDataType; float16 and bfloat16 are converted with
// core/half.h, bool is one byte, written 0 or 1 (any other byte read back is wrong).
#pragma once

#include <cstdint>
#include <functional>

#include "chorus/types.h"

namespace chorus::bench {

// What rank `rank` holds at element `index` for a collective that moves data (a value in 0..96).
double movedValue(int rank, int64_t index);

// What rank `rank` contributes at element `index` to a reduction by `op`; chosen so that the
// reduction over up to dozens of ranks stays exact (sum: 0..3, prod: 1 or 2 with 2 on every
// fourth rank, min/max: 0..10, bitwise: 0..127, bool: 0 or 1).
double reducedValue(ReduceOp op, DataType dtype, int rank, int64_t index);

// The reduction by `op` over ranks 0..ranks-1 of reducedValue(op, dtype, r, index), in the
// semantics of chorus/types.h (integers wrap, avg truncates toward zero, bool sum is "or").
double reducedExpected(ReduceOp op, DataType dtype, int ranks, int64_t index);

// The largest relative difference accepted: 0 for integers and bool, else one rounding of avg.
double toleranceFor(DataType dtype);

// data[i] = value(i) converted to dtype, for i in [0, count).
void fillBuffer(DataType dtype,
                void* data,
                int64_t count,
                const std::function<double(int64_t)>& value);

// The number of i in [0, count) where data[i] differs from expected(i) (converted to dtype) by
// more than toleranceFor(dtype) relative to max(1, |expected|).
int64_t countMismatches(DataType dtype,
                        const void* data,
                        int64_t count,
                        const std::function<double(int64_t)>& expected);

}  // namespace chorus::bench
