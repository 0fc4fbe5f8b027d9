// chorus/types.h — the element types, reduction operators and devices that every collective speaks.
//
// Contract:
//  - DataType names every element type chorus moves. float16 and bfloat16 are stored as 16-bit
//    patterns and reduced with float32 accumulation (see chorus/communicator.h).
//  - ReduceOp names every reduction. band, bor and bxor apply to integer and bool types only; min
//    and max to every type but the complex ones; avg divides the sum by the number of
//    contributing ranks (truncating toward zero for integers) and is undefined on bool. Integer
//    sums and products wrap around. On the CPU backends (shm, tcp, hierarchical, mpi and
//    mpi_algorithms alike) float min and max propagate NaN; NCCL's (CUDA tensors) may return the
//    other operand.
//  - Device says where a tensor's bytes live. Only kCpu is served by the CPU backends.
//  - All functions here are pure, thread-safe and never block. Parsing functions throw
//    InvalidArgumentError naming the valid spellings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus {

enum class DataType : uint8_t {
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
  // Added after the first nine, so that those keep their values on the wire.
  kInt16,
  kUInt16,
  kUInt32,
  kUInt64,
  kComplex64,   // two float32: real, then imaginary (NumPy's, torch's and C's layout)
  kComplex128,  // two float64
};
inline constexpr int kNumDataTypes = 15;

enum class ReduceOp : uint8_t {
  kSum,
  kProd,
  kMin,
  kMax,
  kAvg,
  kBand,
  kBor,
  kBxor,
};
inline constexpr int kNumReduceOps = 8;

namespace detail {
// By enumerator, in DataType's order (tests/core/dtype_test.cc checks each).
inline constexpr uint8_t kDataTypeSizes[kNumDataTypes] = {2, 2, 4, 8, 1, 1, 4, 8,
                                                          1, 2, 2, 4, 8, 8, 16};
[[noreturn]] void throwInvalidDataType(DataType dtype);
}  // namespace detail

// Size in bytes of one element; InvalidArgumentError for a value that is no DataType. Inline: the
// hot path asks it several times per call.
inline size_t dataTypeSize(DataType dtype) {
  const auto index = static_cast<size_t>(dtype);
  if (index < kNumDataTypes)
    return detail::kDataTypeSizes[index];
  detail::throwInvalidDataType(dtype);
}
// "float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool",
// "int16", "uint16", "uint32", "uint64", "complex64", "complex128".
std::string_view toString(DataType dtype);
// Accepts the names above plus the aliases "half", "float", "double", "short", "int", "long",
// "cfloat" and "cdouble".
DataType parseDataType(std::string_view name);
// float16, bfloat16, float32, float64 (not the complex types).
bool isFloatingPoint(DataType dtype);
bool isComplex(DataType dtype);

// "sum", "prod", "min", "max", "avg", "band", "bor", "bxor".
std::string_view toString(ReduceOp op);
ReduceOp parseReduceOp(std::string_view name);
// Whether `op` is defined on `dtype`: bitwise ops need an integer or bool type, min and max a
// type that is not complex, and avg is undefined on bool.
bool isValidReduction(ReduceOp op, DataType dtype);

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }
  bool isCpu() const { return type == DeviceType::kCpu; }
  // "cpu" or "cuda:N".
  std::string toString() const;
  friend bool operator==(const Device&, const Device&) = default;
};

// The DataType of a C++ element type, for the typed Tensor constructor.
template <typename T>
constexpr DataType dataTypeOf();
template <>
constexpr DataType dataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType dataTypeOf<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType dataTypeOf<int8_t>() {
  return DataType::kInt8;
}
template <>
constexpr DataType dataTypeOf<uint8_t>() {
  return DataType::kUInt8;
}
template <>
constexpr DataType dataTypeOf<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType dataTypeOf<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType dataTypeOf<bool>() {
  return DataType::kBool;
}

}  // namespace chorus
