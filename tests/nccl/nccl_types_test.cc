// chorus's dtypes and reduce ops in NCCL's words (backend/nccl/nccl_types.h). The expected values
// are NCCL's documented types; bool follows the host backends: sum and max are "or" (NCCL max on
// 0/1 bytes), prod and min are "and" (NCCL min).
#include "backend/nccl/nccl_types.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "chorus/error.h"

namespace chorus::backend::nccl {
namespace {

TEST(NcclTypes, EveryDtypeHasItsNcclType) {
  EXPECT_EQ(ncclTypeOf(DataType::kFloat16), ncclFloat16);
  EXPECT_EQ(ncclTypeOf(DataType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(ncclTypeOf(DataType::kFloat32), ncclFloat32);
  EXPECT_EQ(ncclTypeOf(DataType::kFloat64), ncclFloat64);
  EXPECT_EQ(ncclTypeOf(DataType::kInt8), ncclInt8);
  EXPECT_EQ(ncclTypeOf(DataType::kUInt8), ncclUint8);
  EXPECT_EQ(ncclTypeOf(DataType::kInt32), ncclInt32);
  EXPECT_EQ(ncclTypeOf(DataType::kInt64), ncclInt64);
  EXPECT_EQ(ncclTypeOf(DataType::kBool), ncclUint8);
  EXPECT_EQ(ncclTypeOf(DataType::kUInt32), ncclUint32);
  EXPECT_EQ(ncclTypeOf(DataType::kUInt64), ncclUint64);
}

// NCCL has no complex type: a complex element reduces as its two float parts.
TEST(NcclTypes, ComplexSumAndAvgReduceTheirParts) {
  EXPECT_EQ(ncclTypeOf(DataType::kComplex64), ncclFloat32);
  EXPECT_EQ(ncclTypeOf(DataType::kComplex128), ncclFloat64);
  EXPECT_EQ(ncclPartsPerElement(DataType::kComplex64), 2u);
  EXPECT_EQ(ncclPartsPerElement(DataType::kComplex128), 2u);
  EXPECT_EQ(ncclPartsPerElement(DataType::kFloat64), 1u);
  EXPECT_EQ(ncclPartsPerElement(DataType::kUInt64), 1u);
  for (DataType dtype : {DataType::kComplex64, DataType::kComplex128}) {
    EXPECT_EQ(ncclOpOf(ReduceOp::kSum, dtype, 0), ncclSum);
    EXPECT_EQ(ncclOpOf(ReduceOp::kAvg, dtype, 0), ncclAvg);
  }
}

TEST(NcclTypes, WhatNcclCannotReduceIsUnsupportedAndSaysWhy) {
  const std::tuple<ReduceOp, DataType, const char*> refused[] = {
      {ReduceOp::kProd, DataType::kComplex64, "NCCL has no complex type"},
      {ReduceOp::kProd, DataType::kComplex128, "NCCL has no complex type"},
      {ReduceOp::kSum, DataType::kInt16, "no 16-bit integer type"},
      {ReduceOp::kMax, DataType::kUInt16, "no 16-bit integer type"},
  };
  for (const auto& [op, dtype, why] : refused) {
    try {
      ncclOpOf(op, dtype, 1);
      FAIL() << toString(op) << " on " << toString(dtype) << " was accepted";
    } catch (const UnsupportedError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("rank 1 (this process)"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string(toString(dtype))), std::string::npos) << message;
      EXPECT_NE(message.find(why), std::string::npos) << message;
    }
  }
}

TEST(NcclTypes, ArithmeticOpsMapOneToOne) {
  for (DataType dtype :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kInt32,
        DataType::kInt64, DataType::kUInt32, DataType::kUInt64}) {
    EXPECT_EQ(ncclOpOf(ReduceOp::kSum, dtype, 0), ncclSum);
    EXPECT_EQ(ncclOpOf(ReduceOp::kProd, dtype, 0), ncclProd);
    EXPECT_EQ(ncclOpOf(ReduceOp::kMin, dtype, 0), ncclMin);
    EXPECT_EQ(ncclOpOf(ReduceOp::kMax, dtype, 0), ncclMax);
    EXPECT_EQ(ncclOpOf(ReduceOp::kAvg, dtype, 0), ncclAvg);
  }
}

TEST(NcclTypes, BoolReducesAsLogicalOrAndAnd) {
  EXPECT_EQ(ncclOpOf(ReduceOp::kSum, DataType::kBool, 0), ncclMax);
  EXPECT_EQ(ncclOpOf(ReduceOp::kMax, DataType::kBool, 0), ncclMax);
  EXPECT_EQ(ncclOpOf(ReduceOp::kBor, DataType::kBool, 0), ncclMax);
  EXPECT_EQ(ncclOpOf(ReduceOp::kProd, DataType::kBool, 0), ncclMin);
  EXPECT_EQ(ncclOpOf(ReduceOp::kMin, DataType::kBool, 0), ncclMin);
  EXPECT_EQ(ncclOpOf(ReduceOp::kBand, DataType::kBool, 0), ncclMin);
}

TEST(NcclTypes, BitwiseOpsNcclLacksAreUnsupportedAndSaySo) {
  const std::pair<ReduceOp, DataType> refused[] = {
      {ReduceOp::kBand, DataType::kInt32},
      {ReduceOp::kBor, DataType::kUInt8},
      {ReduceOp::kBxor, DataType::kInt64},
      {ReduceOp::kBxor, DataType::kBool},
  };
  for (const auto& [op, dtype] : refused) {
    try {
      ncclOpOf(op, dtype, 2);
      FAIL() << toString(op) << " on " << toString(dtype) << " was accepted";
    } catch (const UnsupportedError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("rank 2 (this process)"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string(toString(op))), std::string::npos) << message;
      EXPECT_NE(message.find("NCCL has no bitwise reductions"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace chorus::backend::nccl
