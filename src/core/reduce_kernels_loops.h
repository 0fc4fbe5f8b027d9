// The element-wise operators and loops behind reduce_kernels.cc. Internal to that file.
//
// Everything here is `always_inline`, so each loop is compiled inside the kernel entry point that
// uses it and takes that entry's instruction set (see Note [Kernel instruction sets] in
// reduce_kernels.cc). Loop bodies are branch-free element maps over __restrict pointers, which GCC
// and Clang vectorize at -O3.
//
// Operators work on the "compute" type: the element type itself, or float for float16/bfloat16.
//  - Integer sum and prod wrap (two's complement), computed in unsigned arithmetic to avoid UB.
//  - Floating-point min and max propagate NaN: if either operand is NaN the result is NaN. When the
//    operands compare equal (+0 and -0) the second one is returned.
//  - bool is stored as one byte; or/and/xor treat any non-zero byte as true and store 0 or 1.
//  - Complex values (Complex<float>, Complex<double>) take sum and prod only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CHORUS_KERNELS_X86 1
#define CHORUS_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#else
#define CHORUS_KERNELS_X86 0
#define CHORUS_TARGET_AVX2
#endif

#define CHORUS_ALWAYS_INLINE inline __attribute__((always_inline))

namespace chorus::kernels::detail {

// ---- Complex values ------------------------------------------------------------------------

// A complex number as NumPy, torch and C lay it out: the real part, then the imaginary part.
template <typename F>
struct Complex {
  F re;
  F im;
};

template <typename T>
inline constexpr bool kIsComplex = false;
template <typename F>
inline constexpr bool kIsComplex<Complex<F>> = true;

template <typename F>
CHORUS_ALWAYS_INLINE Complex<F> operator+(Complex<F> a, Complex<F> b) {
  return {a.re + b.re, a.im + b.im};
}

// The textbook product, as NumPy computes it: (ac - bd) + (ad + bc)i, without C99's recovery of
// infinities from NaN results (which std::complex does in a library call per element).
template <typename F>
CHORUS_ALWAYS_INLINE Complex<F> operator*(Complex<F> a, Complex<F> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// ---- Operators -----------------------------------------------------------------------------

template <typename T>
using WrapType = std::make_unsigned_t<T>;

struct SumOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};

struct MinOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      return ((a < b) | (a != a)) ? a : b;  // a when a is NaN; b (NaN or not) otherwise
    }
  }
};

struct MaxOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return ((a > b) | (a != a)) ? a : b;
    }
  }
};

struct BandOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};

struct BorOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};

struct BxorOp {
  template <typename T>
  static CHORUS_ALWAYS_INLINE T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

// bool (one byte each): sum/max/bor are "or", prod/min/band "and", bxor "xor".
struct BoolOrOp {
  static CHORUS_ALWAYS_INLINE uint8_t apply(uint8_t a, uint8_t b) {
    return static_cast<uint8_t>((a | b) != 0);
  }
};

struct BoolAndOp {
  static CHORUS_ALWAYS_INLINE uint8_t apply(uint8_t a, uint8_t b) {
    return static_cast<uint8_t>((a != 0) & (b != 0));
  }
};

struct BoolXorOp {
  static CHORUS_ALWAYS_INLINE uint8_t apply(uint8_t a, uint8_t b) {
    return static_cast<uint8_t>((a != 0) ^ (b != 0));
  }
};

// ---- Loops over the compute type ------------------------------------------------------------

// dst[i] = dst[i] op src[i]
template <typename Op, typename T>
CHORUS_ALWAYS_INLINE void combineInto(T* __restrict dst, const T* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Op::apply(dst[i], src[i]);
  }
}

// out[i] = a[i] op b[i]
template <typename Op, typename T>
CHORUS_ALWAYS_INLINE void combine(T* __restrict out,
                                  const T* __restrict a,
                                  const T* __restrict b,
                                  size_t count) {
  for (size_t i = 0; i < count; ++i) {
    out[i] = Op::apply(a[i], b[i]);
  }
}

// ---- Half-precision conversion, branch-free (vectorizes with plain SSE2) ---------------------
//
// After M. Dukhan's FP16 library: float arithmetic does the rounding, so the result is round to
// nearest even under the default rounding mode. NaN handling matches half.cc and F16C exactly.

CHORUS_ALWAYS_INLINE float softFloat16ToFloat(uint16_t value) {
  uint32_t word = uint32_t{value} << 16;
  uint32_t sign = word & 0x80000000u;
  uint32_t twoWord = word + word;
  // Normal, infinite and NaN halves: move exponent and mantissa into place and rescale the bias.
  float normalized = half::bitsToFloat((twoWord >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  // Subnormal halves: 0.5 + mantissa * 2^-24, minus 0.5, is exact.
  float denormalized = half::bitsToFloat((twoWord >> 17) | (126u << 23)) - 0.5f;
  // Select with a mask, not ?:, which GCC turns into a branch that blocks vectorization.
  uint32_t isSubnormal = 0u - static_cast<uint32_t>(twoWord < (1u << 27));
  uint32_t magnitude = (half::floatToBits(denormalized) & isSubnormal) |
                       (half::floatToBits(normalized) & ~isSubnormal);
  return half::bitsToFloat(sign | magnitude);
}

CHORUS_ALWAYS_INLINE uint16_t softFloatToFloat16(float value) {
  // Scaling up then down makes the float unit drop the bits that a half cannot hold, rounding to
  // nearest even, and sends values above the half range to infinity.
  float base = (std::fabs(value) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t word = half::floatToBits(value);
  uint32_t twoWord = word + word;
  uint32_t sign = word & 0x80000000u;
  uint32_t bias = twoWord & 0xff000000u;
  uint32_t isSmall = 0u - static_cast<uint32_t>(bias < 0x71000000u);
  bias = (0x71000000u & isSmall) | (bias & ~isSmall);
  base = half::bitsToFloat((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = half::floatToBits(base);
  uint32_t nonSign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
  uint32_t nan = 0x7e00u | ((word >> 13) & 0x3ffu);
  uint32_t isNan = 0u - static_cast<uint32_t>(twoWord > 0xff000000u);
  return static_cast<uint16_t>((sign >> 16) | (nan & isNan) | (nonSign & ~isNan));
}

// bfloat16 narrowing without the early return of half::floatToBfloat16 (same results).
CHORUS_ALWAYS_INLINE uint16_t branchFreeFloatToBfloat16(float value) {
  uint32_t bits = half::floatToBits(value);
  uint32_t nan = (bits >> 16) | 0x40u;
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// ---- Instruction-set specific pieces -------------------------------------------------------

// The parts of a kernel that differ between instruction sets: float16 conversion.
struct GenericIsa {
  static CHORUS_ALWAYS_INLINE void widenFloat16(const uint16_t* __restrict src,
                                                float* __restrict dst,
                                                size_t count) {
    for (size_t i = 0; i < count; ++i) {
      dst[i] = softFloat16ToFloat(src[i]);
    }
  }
  static CHORUS_ALWAYS_INLINE void narrowFloat16(const float* __restrict src,
                                                 uint16_t* __restrict dst,
                                                 size_t count) {
    for (size_t i = 0; i < count; ++i) {
      dst[i] = softFloatToFloat16(src[i]);
    }
  }
};

#if CHORUS_KERNELS_X86
// AVX2 + F16C: vcvtph2ps / vcvtps2ph, eight lanes at a time; scalar F16C for the tail. Not
// always_inline: the always_inline helpers between a kernel entry and these functions are compiled
// for the baseline target, and GCC refuses to force AVX2 code into them. One call per block.
struct Avx2Isa {
  CHORUS_TARGET_AVX2 static void widenFloat16(const uint16_t* __restrict src,
                                              float* __restrict dst,
                                              size_t count) {
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(halves));
    }
    for (; i < count; ++i) {
      dst[i] = _cvtsh_ss(src[i]);
    }
  }
  CHORUS_TARGET_AVX2 static void narrowFloat16(const float* __restrict src,
                                               uint16_t* __restrict dst,
                                               size_t count) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT;
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), halves);
    }
    for (; i < count; ++i) {
      dst[i] = _cvtss_sh(src[i], kRound);
    }
  }
};
#else
struct Avx2Isa : GenericIsa {};
#endif

// ---- Storage formats -----------------------------------------------------------------------

// A storage format: how elements sit in memory (Storage) and what operators see (Compute).
template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static constexpr bool kIsHalf = false;
};

struct Float16 {
  using Storage = uint16_t;
  using Compute = float;
  static constexpr bool kIsHalf = true;
  template <typename Isa>
  static CHORUS_ALWAYS_INLINE void widen(const uint16_t* src, float* dst, size_t count) {
    Isa::widenFloat16(src, dst, count);
  }
  template <typename Isa>
  static CHORUS_ALWAYS_INLINE void narrow(const float* src, uint16_t* dst, size_t count) {
    Isa::narrowFloat16(src, dst, count);
  }
};

struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static constexpr bool kIsHalf = true;
  template <typename Isa>
  static CHORUS_ALWAYS_INLINE void widen(const uint16_t* __restrict src,
                                         float* __restrict dst,
                                         size_t count) {
    for (size_t i = 0; i < count; ++i) {
      dst[i] = half::bfloat16ToFloat(src[i]);
    }
  }
  template <typename Isa>
  static CHORUS_ALWAYS_INLINE void narrow(const float* __restrict src,
                                          uint16_t* __restrict dst,
                                          size_t count) {
    for (size_t i = 0; i < count; ++i) {
      dst[i] = branchFreeFloatToBfloat16(src[i]);
    }
  }
};

}  // namespace chorus::kernels::detail
