// Names, sizes and validity rules for DataType, ReduceOp and Device (see chorus/types.h).
#include <array>
#include <string>

#include "chorus/types.h"
#include "core/check.h"

namespace chorus {
namespace {

constexpr std::array<std::string_view, kNumDataTypes> kDataTypeNames = {
    "float16", "bfloat16", "float32", "float64", "int8",   "uint8",     "int32",     "int64",
    "bool",    "int16",    "uint16",  "uint32",  "uint64", "complex64", "complex128"};

constexpr std::array<std::string_view, kNumReduceOps> kReduceOpNames = {
    "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};

struct DataTypeAlias {
  std::string_view name;
  DataType dtype;
};
constexpr DataTypeAlias kDataTypeAliases[] = {
    {"half", DataType::kFloat16},     {"float", DataType::kFloat32},
    {"double", DataType::kFloat64},   {"short", DataType::kInt16},
    {"int", DataType::kInt32},        {"long", DataType::kInt64},
    {"cfloat", DataType::kComplex64}, {"cdouble", DataType::kComplex128}};

bool isIntegral(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kInt16:
    case DataType::kUInt16:
    case DataType::kInt32:
    case DataType::kUInt32:
    case DataType::kInt64:
    case DataType::kUInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

namespace detail {
void throwInvalidDataType(DataType dtype) {
  throw InvalidArgumentError(
      concat("invalid DataType value ", static_cast<int>(dtype), "; this is not a dtype"));
}
}  // namespace detail

std::string_view toString(DataType dtype) {
  auto index = static_cast<size_t>(dtype);
  return index < kDataTypeNames.size() ? kDataTypeNames[index] : "invalid_dtype";
}

DataType parseDataType(std::string_view name) {
  for (size_t i = 0; i < kDataTypeNames.size(); ++i) {
    if (kDataTypeNames[i] == name) {
      return static_cast<DataType>(i);
    }
  }
  for (const auto& alias : kDataTypeAliases) {
    if (alias.name == name) {
      return alias.dtype;
    }
  }
  throw InvalidArgumentError(detail::concat(
      "unknown dtype \"", name,
      "\"; valid dtypes are float16, bfloat16, float32, float64, int8, uint8, int16, uint16, "
      "int32, uint32, int64, uint64, bool, complex64, complex128 (aliases: half, float, double, "
      "short, int, long, cfloat, cdouble)"));
}

bool isFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool isComplex(DataType dtype) {
  return dtype == DataType::kComplex64 || dtype == DataType::kComplex128;
}

std::string_view toString(ReduceOp op) {
  auto index = static_cast<size_t>(op);
  return index < kReduceOpNames.size() ? kReduceOpNames[index] : "invalid_op";
}

ReduceOp parseReduceOp(std::string_view name) {
  for (size_t i = 0; i < kReduceOpNames.size(); ++i) {
    if (kReduceOpNames[i] == name) {
      return static_cast<ReduceOp>(i);
    }
  }
  std::string valid;
  for (std::string_view known : kReduceOpNames) valid += detail::concat("'", known, "', ");
  valid.resize(valid.size() - 2);
  throw InvalidArgumentError(detail::concat("op must be one of ", valid,
                                            " ('band', 'bor', 'bxor' for integer and bool "
                                            "tensors); got '",
                                            name, "'"));
}

bool isValidReduction(ReduceOp op, DataType dtype) {
  if (static_cast<int>(dtype) >= kNumDataTypes) {
    return false;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
      return true;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return !isComplex(dtype);
    case ReduceOp::kAvg:
      return dtype != DataType::kBool;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return isIntegral(dtype) || dtype == DataType::kBool;
  }
  return false;
}

std::string Device::toString() const {
  switch (type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kCuda:
      return "cuda:" + std::to_string(index);
  }
  return "invalid_device";
}

}  // namespace chorus
