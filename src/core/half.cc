// Scalar IEEE binary16 <-> binary32 conversion, written for clarity: one case per class of value.
//
// float16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. Subnormals have exponent 0 and
// value mantissa * 2^-24. Narrowing rounds to nearest, ties to even; values at or above 65520 (the
// midpoint between 65504, the largest finite half, and 2^16) become infinity. NaNs stay NaN: the
// sign and the top 10 payload bits are kept and the quiet bit is set, which is what the x86 F16C
// instructions do, so the scalar code, the vector kernels and the hardware agree bit for bit.
#include "core/half.h"

namespace chorus::half {

float float16ToFloat(uint16_t value) {
  uint32_t sign = uint32_t{value & 0x8000u} << 16;
  uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0x1f) {  // infinity or NaN
    uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return bitsToFloat(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) {
      return bitsToFloat(sign);
    }
    // Subnormal: shift the mantissa up until its leading one reaches the implicit-bit position.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    uint32_t floatExponent = 127 - 15 + 1 - static_cast<uint32_t>(shift);
    return bitsToFloat(sign | (floatExponent << 23) | ((mantissa & 0x3ffu) << 13));
  }
  return bitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

uint16_t floatToFloat16(float value) {
  uint32_t bits = floatToBits(value);
  auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) {  // >= 65520: rounds to infinity (or is infinity)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal half
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even. A
    // carry out of the mantissa correctly bumps the exponent.
    uint32_t rebiased = magnitude - ((127u - 15u) << 23);
    uint32_t rounded = rebiased + 0xfffu + ((rebiased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  if (magnitude <= 0x33000000u) {  // <= 2^-25: rounds to zero (2^-25 itself is a tie to even 0)
    return sign;
  }
  // Subnormal half: value = significand * 2^(exponent - 150); in units of 2^-24 that is
  // significand >> (126 - exponent), rounded to nearest even. A result of 0x400 is the smallest
  // normal, which is the correct encoding too.
  uint32_t exponent = magnitude >> 23;
  uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exponent;  // 14 ..= 24 here
  uint32_t quotient = significand >> shift;
  uint32_t remainder = significand & ((1u << shift) - 1u);
  uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (quotient & 1u) != 0)) {
    ++quotient;
  }
  return static_cast<uint16_t>(sign | quotient);
}

}  // namespace chorus::half
