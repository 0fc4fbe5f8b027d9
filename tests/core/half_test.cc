// float16 / bfloat16 conversions: the scalar functions (half.h) and the vector kernels
// (widenToFloat32 / narrowFromFloat32, every instruction-set variant) against a reference built
// from the IEEE definitions in double arithmetic. Exhaustive over all 65536 patterns, plus every
// rounding midpoint and its neighbours, plus random float bit patterns.
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "chorus/error.h"
#include "core/reduce_kernels.h"
#include "test_support.h"

namespace chorus::test {
namespace {

using half::bfloat16ToFloat;
using half::float16ToFloat;
using half::floatToBfloat16;
using half::floatToFloat16;

// What narrowing must return for `value`: the reference rounding, or for NaN the sign, the
// quiet bit and the top payload bits.
uint16_t expectedNarrow(float value, BinaryFormat format) {
  uint32_t bits = floatBits(value);
  if (std::isnan(value)) {
    int dropped = 24 - format.precision;
    uint32_t quiet = 1u << (format.precision - 2);
    uint32_t payload = (bits & 0x7fffffu) >> dropped;
    return static_cast<uint16_t>((bits >> 31 ? format.signBit() : 0) | format.infinityBits() |
                                 quiet | payload);
  }
  return static_cast<uint16_t>(referenceEncode(value, format));
}

// What widening must return: the exact value, or for NaN the payload shifted up; float16 NaNs
// are made quiet (as F16C does), bfloat16 widening is a plain shift that keeps every bit.
uint32_t expectedWidenBits(uint16_t bits, BinaryFormat format) {
  double value = referenceDecode(bits, format);
  if (std::isnan(value) && format.precision == kBFloat16Format.precision) {
    return uint32_t{bits} << 16;
  }
  if (std::isnan(value)) {
    uint32_t sign = (bits & format.signBit()) ? 0x80000000u : 0;
    uint32_t payload = (bits & ((1u << (format.precision - 1)) - 1)) << (24 - format.precision);
    return sign | 0x7fc00000u | payload;
  }
  return floatBits(static_cast<float>(value));
}

// Floats that exercise rounding: every representable value of the format, the midpoint between
// each pair of neighbours, and the floats just either side of each midpoint; both signs.
std::vector<float> roundingProbes(BinaryFormat format) {
  std::vector<float> probes;
  for (uint32_t bits = 0; bits < format.infinityBits(); ++bits) {
    double low = referenceDecode(bits, format);
    double high = referenceDecode(bits + 1, format);
    if (std::isinf(high)) {  // the next value up would be 2^(emax+1)
      high = std::ldexp(1.0, format.bias() + 1);
    }
    auto mid = static_cast<float>((low + high) / 2);
    EXPECT_EQ(static_cast<double>(mid), (low + high) / 2) << "midpoint not exact";
    for (float probe :
         {static_cast<float>(low), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      probes.push_back(probe);
      probes.push_back(-probe);
    }
  }
  return probes;
}

std::vector<float> randomFloats(size_t count) {
  std::mt19937 random(12345);
  std::vector<float> values(count);
  for (auto& value : values) {
    value = floatFromBits(static_cast<uint32_t>(random()));
  }
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                           0x00000001u, 0x80000000u, 0x477ff000u, 0x477fefffu, 0x33000000u}) {
    values.push_back(floatFromBits(special));
  }
  return values;
}

TEST(Float16Test, DecodesEveryPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float value = float16ToFloat(static_cast<uint16_t>(bits));
    ASSERT_EQ(floatBits(value), expectedWidenBits(static_cast<uint16_t>(bits), kFloat16Format))
        << std::hex << "pattern 0x" << bits;
  }
}

TEST(Float16Test, RoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    auto pattern = static_cast<uint16_t>(bits);
    uint16_t back = floatToFloat16(float16ToFloat(pattern));
    uint16_t expected = isNanBits(bits, kFloat16Format) ? (pattern | 0x200) : pattern;
    ASSERT_EQ(back, expected) << std::hex << "pattern 0x" << bits;
  }
}

TEST(Float16Test, RoundsToNearestEvenAtEveryMidpoint) {
  for (float probe : roundingProbes(kFloat16Format)) {
    ASSERT_EQ(floatToFloat16(probe), expectedNarrow(probe, kFloat16Format)) << probe;
  }
}

TEST(Float16Test, RoundsRandomFloats) {
  for (float value : randomFloats(1 << 20)) {
    ASSERT_EQ(floatToFloat16(value), expectedNarrow(value, kFloat16Format))
        << std::hex << floatBits(value);
  }
}

TEST(Float16Test, ChosenValues) {
  struct Case {
    float value;
    uint16_t bits;
  };
  const Case cases[] = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.1f, 0x2e66},
      {1.0f / 3, 0x3555},
      {65504.0f, 0x7bff},
      {65519.99f, 0x7bff},
      {65520.0f, 0x7c00},
      {1e10f, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1p-14f, 0x0400},
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},
      {0x1.8p-25f, 0x0001},
      {-0x1p-26f, 0x8000},
      {1.0f + 0x1p-11f, 0x3c00},  // tie, rounds to even
      {1.0f + 0x3p-11f, 0x3c02},  // tie, rounds to even (up)
      {0x1.ffcp-15f, 0x0400},     // subnormal rounding carries into the smallest normal
  };
  for (const auto& c : cases) {
    EXPECT_EQ(floatToFloat16(c.value), c.bits) << c.value;
  }
  EXPECT_EQ(floatToFloat16(floatFromBits(0x7fc00000u)), 0x7e00);
  EXPECT_EQ(floatToFloat16(floatFromBits(0xff800001u)), 0xfe00);  // signalling NaN: quiet, signed
  EXPECT_EQ(float16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(float16ToFloat(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::signbit(float16ToFloat(0x8000)));
}

TEST(BFloat16Test, DecodesAndRoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    auto pattern = static_cast<uint16_t>(bits);
    float value = bfloat16ToFloat(pattern);
    double reference = referenceDecode(bits, kBFloat16Format);
    if (std::isnan(reference)) {
      ASSERT_TRUE(std::isnan(value));
      ASSERT_EQ(floatToBfloat16(value), pattern | 0x40) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(value), reference) << std::hex << bits;
      ASSERT_EQ(floatToBfloat16(value), pattern) << std::hex << bits;
    }
  }
}

TEST(BFloat16Test, RoundsToNearestEvenAtEveryMidpoint) {
  for (float probe : roundingProbes(kBFloat16Format)) {
    ASSERT_EQ(floatToBfloat16(probe), expectedNarrow(probe, kBFloat16Format)) << probe;
  }
}

TEST(BFloat16Test, RoundsRandomFloatsAndChosenValues) {
  for (float value : randomFloats(1 << 20)) {
    ASSERT_EQ(floatToBfloat16(value), expectedNarrow(value, kBFloat16Format))
        << std::hex << floatBits(value);
  }
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBfloat16(1.0f + 0x1p-8f), 0x3f80);  // tie to even
  EXPECT_EQ(floatToBfloat16(1.0f + 0x3p-8f), 0x3f82);  // tie to even (up)
  EXPECT_EQ(floatToBfloat16(0x1.fep127f), 0x7f7f);     // largest finite
  EXPECT_EQ(floatToBfloat16(0x1.ffp127f), 0x7f80);     // overflow tie rounds to infinity
  EXPECT_EQ(floatToBfloat16(floatFromBits(0x7f800001u)), 0x7fc0);
}

// The vector kernels, in every variant this CPU runs, give exactly the scalar results.
class HalfKernelTest : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(HalfKernelTest, WidensEveryPattern) {
  ScopedIsa isa(GetParam());
  std::vector<uint16_t> patterns(65536 + 5);
  for (size_t i = 0; i < patterns.size(); ++i) {
    patterns[i] = static_cast<uint16_t>(i);
  }
  std::vector<float> widened(patterns.size());
  for (auto [dtype, format] : {std::pair{DataType::kFloat16, kFloat16Format},
                               std::pair{DataType::kBFloat16, kBFloat16Format}}) {
    // Offset by one element so the vector loop runs on unaligned addresses and has a tail.
    kernels::widenToFloat32(dtype, patterns.data() + 1, widened.data() + 1, patterns.size() - 1);
    for (size_t i = 1; i < patterns.size(); ++i) {
      ASSERT_EQ(floatBits(widened[i]), expectedWidenBits(patterns[i], format))
          << toString(dtype) << std::hex << " pattern 0x" << patterns[i];
    }
  }
}

TEST_P(HalfKernelTest, NarrowsProbesAndRandomFloats) {
  ScopedIsa isa(GetParam());
  for (auto [dtype, format] : {std::pair{DataType::kFloat16, kFloat16Format},
                               std::pair{DataType::kBFloat16, kBFloat16Format}}) {
    std::vector<float> inputs = roundingProbes(format);
    std::vector<float> random = randomFloats(1 << 18);
    inputs.insert(inputs.end(), random.begin(), random.end());
    std::vector<uint16_t> narrowed(inputs.size());
    kernels::narrowFromFloat32(dtype, inputs.data() + 3, narrowed.data() + 3, inputs.size() - 3);
    for (size_t i = 3; i < inputs.size(); ++i) {
      ASSERT_EQ(narrowed[i], expectedNarrow(inputs[i], format))
          << toString(dtype) << std::hex << " input 0x" << floatBits(inputs[i]);
    }
  }
}

TEST_P(HalfKernelTest, RejectsOtherTypes) {
  ScopedIsa isa(GetParam());
  float values[1] = {};
  EXPECT_THROW(kernels::widenToFloat32(DataType::kFloat32, values, values, 1),
               InvalidArgumentError);
  EXPECT_THROW(kernels::narrowFromFloat32(DataType::kInt32, values, values, 1),
               InvalidArgumentError);
}

INSTANTIATE_TEST_SUITE_P(AllIsas,
                         HalfKernelTest,
                         ::testing::ValuesIn(supportedIsas()),
                         [](const auto& info) {
                           return std::string(kernels::toString(info.param));
                         });

}  // namespace
}  // namespace chorus::test
