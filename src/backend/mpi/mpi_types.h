// chorus's dtypes and reduce ops in MPI's terms: the one mapping, used by the MPI backend and by
// chorus-bench's MPI reference (bench/mpi_reference.cc), so both ask MPI for the same operation.
// Header-only (the bench links only the public library). Only compiled with CHORUS_WITH_MPI.
#pragma once

#include <mpi.h>

#include "chorus/types.h"

namespace chorus::backend::mpi {

// The MPI type of `dtype`, or MPI_DATATYPE_NULL when MPI has none (float16, bfloat16).
inline MPI_Datatype mpiType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kBool:
      return MPI_C_BOOL;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kUInt16:
      return MPI_UINT16_T;
    case DataType::kUInt32:
      return MPI_UINT32_T;
    case DataType::kUInt64:
      return MPI_UINT64_T;
    case DataType::kComplex64:
      return MPI_C_FLOAT_COMPLEX;
    case DataType::kComplex128:
      return MPI_C_DOUBLE_COMPLEX;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_DATATYPE_NULL;
  }
  return MPI_DATATYPE_NULL;
}

// The MPI op of `op` on `dtype`, or MPI_OP_NULL when MPI has none (avg; the bitwise ops on
// floating and complex types; min and max on complex ones). On bool chorus's sum and max are "or",
// prod and min "and" (chorus/types.h), and MPI defines only the logical ops on MPI_C_BOOL.
inline MPI_Op mpiOp(ReduceOp op, DataType dtype) {
  const bool logical = dtype == DataType::kBool;
  const bool bitwise = !isFloatingPoint(dtype) && !isComplex(dtype) && !logical;
  switch (op) {
    case ReduceOp::kSum:
      return logical ? MPI_LOR : MPI_SUM;
    case ReduceOp::kProd:
      return logical ? MPI_LAND : MPI_PROD;
    case ReduceOp::kMin:
      return logical ? MPI_LAND : isComplex(dtype) ? MPI_OP_NULL : MPI_MIN;
    case ReduceOp::kMax:
      return logical ? MPI_LOR : isComplex(dtype) ? MPI_OP_NULL : MPI_MAX;
    case ReduceOp::kBand:
      return logical ? MPI_LAND : bitwise ? MPI_BAND : MPI_OP_NULL;
    case ReduceOp::kBor:
      return logical ? MPI_LOR : bitwise ? MPI_BOR : MPI_OP_NULL;
    case ReduceOp::kBxor:
      return logical ? MPI_LXOR : bitwise ? MPI_BXOR : MPI_OP_NULL;
    case ReduceOp::kAvg:
      return MPI_OP_NULL;
  }
  return MPI_OP_NULL;
}

}  // namespace chorus::backend::mpi
