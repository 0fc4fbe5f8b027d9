// Independent references for the core tests: half-precision encode/decode written from the IEEE
// definitions in double arithmetic (not from the bit tricks under test), a dtype visitor so each
// test is written once for all element types, and comparisons that treat NaN as equal to NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "chorus/types.h"
#include "core/reduce_kernels_isa.h"

namespace chorus::test {

// A binary floating-point format: precision in bits (implicit bit included), exponent bits.
struct BinaryFormat {
  int precision;
  int exponentBits;
  int bias() const { return (1 << (exponentBits - 1)) - 1; }
  int minExponent() const { return 1 - bias(); }
  uint32_t maxField() const { return (1u << exponentBits) - 1; }
  uint32_t infinityBits() const { return maxField() << (precision - 1); }
  uint32_t signBit() const { return 1u << (exponentBits + precision - 1); }
};
inline constexpr BinaryFormat kFloat16Format{11, 5};
inline constexpr BinaryFormat kBFloat16Format{8, 8};

// The value of a bit pattern (NaN for NaN patterns).
inline double referenceDecode(uint32_t bits, BinaryFormat format) {
  int fractionBits = format.precision - 1;
  bool negative = (bits & format.signBit()) != 0;
  uint32_t field = (bits >> fractionBits) & format.maxField();
  uint32_t fraction = bits & ((1u << fractionBits) - 1);
  double magnitude;
  if (field == format.maxField()) {
    magnitude = fraction == 0 ? INFINITY : NAN;
  } else if (field == 0) {
    magnitude = std::ldexp(static_cast<double>(fraction), format.minExponent() - fractionBits);
  } else {
    magnitude = std::ldexp(static_cast<double>((1u << fractionBits) | fraction),
                           static_cast<int>(field) - format.bias() - fractionBits);
  }
  return negative ? -magnitude : magnitude;
}

// Rounds a non-NaN double to the format, to nearest with ties to even, and encodes it.
inline uint32_t referenceEncode(double value, BinaryFormat format) {
  int fractionBits = format.precision - 1;
  uint32_t sign = std::signbit(value) ? format.signBit() : 0;
  double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) {
    return sign | format.infinityBits();
  }
  int exponent =
      magnitude == 0 ? format.minExponent() : std::max(std::ilogb(magnitude), format.minExponent());
  double quantum = std::ldexp(1.0, exponent - fractionBits);
  double rounded = std::nearbyint(magnitude / quantum) * quantum;  // default mode: ties to even
  if (rounded >= std::ldexp(1.0, format.bias() + 1)) {
    return sign | format.infinityBits();
  }
  if (rounded < std::ldexp(1.0, format.minExponent())) {  // zero or subnormal
    return sign |
           static_cast<uint32_t>(rounded / std::ldexp(1.0, format.minExponent() - fractionBits));
  }
  int roundedExponent = std::ilogb(rounded);
  auto significand =
      static_cast<uint32_t>(rounded / std::ldexp(1.0, roundedExponent - fractionBits));
  auto field = static_cast<uint32_t>(roundedExponent + format.bias());
  return sign | (field << fractionBits) | (significand - (1u << fractionBits));
}

inline bool isNanBits(uint32_t bits, BinaryFormat format) {
  uint32_t magnitude = bits & (format.signBit() - 1);
  return magnitude > format.infinityBits();
}

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Tag types naming the storage of each DataType, for visitDataType.
struct Float16Tag {
  using Storage = uint16_t;
  static constexpr BinaryFormat format = kFloat16Format;
};
struct BFloat16Tag {
  using Storage = uint16_t;
  static constexpr BinaryFormat format = kBFloat16Format;
};
struct BoolTag {
  using Storage = uint8_t;
};
template <typename T>
struct PlainTag {
  using Storage = T;
};
// complex64 / complex128: std::complex has the layout chorus reduces (real, then imaginary).
template <typename F>
struct ComplexTag {
  using Storage = std::complex<F>;
};
template <typename Tag>
inline constexpr bool kIsComplexTag = false;
template <typename F>
inline constexpr bool kIsComplexTag<ComplexTag<F>> = true;

template <typename Tag>
inline constexpr bool kIsHalfTag =
    std::is_same_v<Tag, Float16Tag> || std::is_same_v<Tag, BFloat16Tag>;

// Calls fn(Tag{}) with the tag of `dtype`: the one place the tests switch on DataType.
template <typename Fn>
decltype(auto) visitDataType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat16:
      return fn(Float16Tag{});
    case DataType::kBFloat16:
      return fn(BFloat16Tag{});
    case DataType::kFloat32:
      return fn(PlainTag<float>{});
    case DataType::kFloat64:
      return fn(PlainTag<double>{});
    case DataType::kInt8:
      return fn(PlainTag<int8_t>{});
    case DataType::kUInt8:
      return fn(PlainTag<uint8_t>{});
    case DataType::kInt32:
      return fn(PlainTag<int32_t>{});
    case DataType::kInt64:
      return fn(PlainTag<int64_t>{});
    case DataType::kBool:
      return fn(BoolTag{});
    case DataType::kInt16:
      return fn(PlainTag<int16_t>{});
    case DataType::kUInt16:
      return fn(PlainTag<uint16_t>{});
    case DataType::kUInt32:
      return fn(PlainTag<uint32_t>{});
    case DataType::kUInt64:
      return fn(PlainTag<uint64_t>{});
    case DataType::kComplex64:
      return fn(ComplexTag<float>{});
    case DataType::kComplex128:
      return fn(ComplexTag<double>{});
  }
  throw std::logic_error("bad dtype");
}

inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat16, DataType::kBFloat16,  DataType::kFloat32,   DataType::kFloat64,
    DataType::kInt8,    DataType::kUInt8,     DataType::kInt32,     DataType::kInt64,
    DataType::kBool,    DataType::kInt16,     DataType::kUInt16,    DataType::kUInt32,
    DataType::kUInt64,  DataType::kComplex64, DataType::kComplex128};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg,  ReduceOp::kBand,
                                             ReduceOp::kBor, ReduceOp::kBxor};

// The kernel variants this CPU can run, and a scope that forces one.
inline std::vector<kernels::Isa> supportedIsas() {
  std::vector<kernels::Isa> isas;
  for (auto isa : {kernels::Isa::kGeneric, kernels::Isa::kAvx2}) {
    if (kernels::isaSupported(isa)) {
      isas.push_back(isa);
    }
  }
  return isas;
}

class ScopedIsa {
 public:
  explicit ScopedIsa(kernels::Isa isa) { kernels::overrideIsa(isa); }
  ~ScopedIsa() { kernels::overrideIsa(std::nullopt); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
};

}  // namespace chorus::test
