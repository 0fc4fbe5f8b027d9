// Scalar float16 (IEEE binary16) and bfloat16 conversions to and from float32, round to nearest
// even, NaN preserved. bfloat16 is inline here; float16 lives in half.cc (the kernels use their own
// vectorized or F16C versions, tested bit-identical to these).
#pragma once

#include <cstdint>
#include <cstring>

namespace chorus::half {

inline float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline uint32_t floatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bfloat16ToFloat(uint16_t value) { return bitsToFloat(uint32_t{value} << 16); }

inline uint16_t floatToBfloat16(float value) {
  uint32_t bits = floatToBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN
  uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

float float16ToFloat(uint16_t value);
uint16_t floatToFloat16(float value);

}  // namespace chorus::half
