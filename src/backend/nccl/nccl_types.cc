// DataType and ReduceOp for NCCL: see nccl_types.h.
#include "backend/nccl/nccl_types.h"

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend::nccl {

ncclDataType_t ncclTypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt32:
      return ncclUint32;
    case DataType::kUInt64:
      return ncclUint64;
    case DataType::kComplex64:
      return ncclFloat32;  // its parts; see ncclPartsPerElement
    case DataType::kComplex128:
      return ncclFloat64;
    case DataType::kInt16:
    case DataType::kUInt16:
      break;  // NCCL has no 16-bit integer type; ncclOpOf refuses their reductions first
  }
  throw InternalError(detail::concat("internal: no NCCL type for dtype ", static_cast<int>(dtype)));
}

size_t ncclPartsPerElement(DataType dtype) { return isComplex(dtype) ? 2 : 1; }

ncclRedOp_t ncclOpOf(ReduceOp op, DataType dtype, int rank) {
  const bool isBool = dtype == DataType::kBool;
  if (dtype == DataType::kInt16 || dtype == DataType::kUInt16) {
    throw UnsupportedError(detail::concat(
        "rank ", rank, " (this process): reduce op '", toString(op), "' on ", toString(dtype),
        " CUDA tensors is not supported: NCCL has no 16-bit integer type (reduce them as int32, "
        "or on the CPU)"));
  }
  if (isComplex(dtype) && op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    throw UnsupportedError(detail::concat(
        "rank ", rank, " (this process): reduce op '", toString(op), "' on ", toString(dtype),
        " CUDA tensors is not supported: NCCL has no complex type, so chorus reduces complex "
        "sum and avg part by part, and cannot do a complex product (reduce on the CPU)"));
  }
  switch (op) {
    case ReduceOp::kSum:
      return isBool ? ncclMax : ncclSum;  // bool sum is logical or
    case ReduceOp::kProd:
      return isBool ? ncclMin : ncclProd;  // bool prod is logical and
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kBor:
      if (isBool)
        return ncclMax;
      break;
    case ReduceOp::kBand:
      if (isBool)
        return ncclMin;
      break;
    case ReduceOp::kBxor:
      break;
  }
  throw UnsupportedError(detail::concat(
      "rank ", rank, " (this process): reduce op '", toString(op), "' on ", toString(dtype),
      " CUDA tensors is not supported: NCCL has no bitwise reductions (bool band/bor work; for "
      "other integers reduce on the CPU, or use min/max where the values are 0 or 1)"));
}

}  // namespace chorus::backend::nccl
