// Reduction kernels (reduce_kernels.h) against a plain scalar reference loop, for every valid
// (instruction set, dtype, op), with counts around the vector widths and block sizes, unaligned
// and aliased buffers, 1 to 8 sources. float16/bfloat16 references widen exactly, combine in float
// and round once (with the double-arithmetic reference rounding of test_support.h).
#include "core/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "core/half.h"
#include "test_support.h"

namespace chorus::test {
namespace {

// ---- The reference -------------------------------------------------------------------------

template <typename Tag>
using StorageOf = typename Tag::Storage;

// Half values decode through a table built from referenceDecode. They round back through the
// scalar half.h functions, which half_test.cc checks against referenceEncode at every rounding
// midpoint (referenceEncode itself is too slow for millions of elements).
template <typename Tag>
const std::vector<float>& decodeTable() {
  static const std::vector<float> table = [] {
    std::vector<float> values(65536);
    for (uint32_t bits = 0; bits < values.size(); ++bits) {
      values[bits] = static_cast<float>(referenceDecode(bits, Tag::format));
    }
    return values;
  }();
  return table;
}

template <typename Tag>
auto toCompute(StorageOf<Tag> value) {
  if constexpr (kIsHalfTag<Tag>) {
    return decodeTable<Tag>()[value];
  } else {
    return value;
  }
}

template <typename Tag, typename C>
StorageOf<Tag> fromCompute(C value) {
  if constexpr (std::is_same_v<Tag, Float16Tag>) {
    return half::floatToFloat16(value);
  } else if constexpr (std::is_same_v<Tag, BFloat16Tag>) {
    return half::floatToBfloat16(value);
  } else {
    return value;
  }
}

template <typename Tag, typename C>
C referenceOp(ReduceOp op, C a, C b) {
  if constexpr (std::is_same_v<Tag, BoolTag>) {
    bool x = a != 0, y = b != 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMax:
      case ReduceOp::kBor:
        return x || y;
      case ReduceOp::kBxor:
        return x != y;
      default:
        return x && y;
    }
  } else if constexpr (kIsComplexTag<Tag>) {
    // The textbook product, as NumPy's (not std::complex's, which recovers infinities from NaN).
    if (op == ReduceOp::kProd) {
      return C(a.real() * b.real() - a.imag() * b.imag(),
               a.real() * b.imag() + a.imag() * b.real());
    }
    return C(a.real() + b.real(), a.imag() + b.imag());  // sum and avg
  } else if constexpr (std::is_floating_point_v<C>) {
    bool anyNan = std::isnan(a) || std::isnan(b);
    switch (op) {
      case ReduceOp::kProd:
        return a * b;
      case ReduceOp::kMin:
        return anyNan ? NAN : (b < a ? b : a);
      case ReduceOp::kMax:
        return anyNan ? NAN : (b > a ? b : a);
      default:
        return a + b;
    }
  } else {
    // Wrap-around arithmetic: compute modulo 2^64, then keep the low bits.
    auto wide = [](C v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); };
    switch (op) {
      case ReduceOp::kProd:
        return static_cast<C>(wide(a) * wide(b));
      case ReduceOp::kMin:
        return b < a ? b : a;
      case ReduceOp::kMax:
        return b > a ? b : a;
      case ReduceOp::kBand:
        return static_cast<C>(a & b);
      case ReduceOp::kBor:
        return static_cast<C>(a | b);
      case ReduceOp::kBxor:
        return static_cast<C>(a ^ b);
      default:
        return static_cast<C>(wide(a) + wide(b));
    }
  }
}

// The reference reduction of one element across sources, in order, rounded once.
template <typename Tag>
StorageOf<Tag> referenceReduce(ReduceOp op, std::span<const StorageOf<Tag>> values) {
  auto acc = toCompute<Tag>(values[0]);
  for (size_t k = 1; k < values.size(); ++k) {
    acc = referenceOp<Tag>(op, acc, toCompute<Tag>(values[k]));
  }
  return fromCompute<Tag>(acc);
}

template <typename Tag>
bool sameResult(ReduceOp op, StorageOf<Tag> got, StorageOf<Tag> expected) {
  bool minMax = op == ReduceOp::kMin || op == ReduceOp::kMax;
  if constexpr (kIsComplexTag<Tag>) {
    using Part = PlainTag<typename StorageOf<Tag>::value_type>;
    return sameResult<Part>(op, got.real(), expected.real()) &&
           sameResult<Part>(op, got.imag(), expected.imag());
  } else if constexpr (kIsHalfTag<Tag>) {
    if (isNanBits(got, Tag::format) || isNanBits(expected, Tag::format)) {
      return isNanBits(got, Tag::format) && isNanBits(expected, Tag::format);
    }
    // min/max of +0 and -0 may return either zero.
    return got == expected || (minMax && toCompute<Tag>(got) == toCompute<Tag>(expected));
  } else if constexpr (std::is_floating_point_v<StorageOf<Tag>>) {
    if (std::isnan(got) || std::isnan(expected)) {
      return std::isnan(got) && std::isnan(expected);
    }
    return std::memcmp(&got, &expected, sizeof got) == 0 || (minMax && got == expected);
  } else {
    return got == expected;
  }
}

// ---- Test data -------------------------------------------------------------------------------

// Values of moderate magnitude with NaN, infinities, signed zeros and subnormals sprinkled in;
// integers over their whole range; bools mostly 0/1 with a few other non-zero bytes.
template <typename Tag>
std::vector<StorageOf<Tag>> makeRandomData(size_t count, std::mt19937_64& random) {
  using S = StorageOf<Tag>;
  std::vector<S> data(count);
  std::uniform_real_distribution<double> mantissa(-4.0, 4.0);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::uniform_int_distribution<int> special(0, 511);
  for (auto& value : data) {
    if constexpr (kIsComplexTag<Tag>) {
      auto parts = makeRandomData<PlainTag<typename S::value_type>>(2, random);
      value = S(parts[0], parts[1]);
    } else if constexpr (std::is_same_v<Tag, BoolTag>) {
      uint64_t bits = random();
      value = static_cast<S>((bits & 0xff) == 0 ? 2 + (bits >> 8) % 254 : (bits >> 8) & 1);
    } else if constexpr (std::is_integral_v<S> && !kIsHalfTag<Tag>) {
      value = static_cast<S>(random());
    } else {
      double number = std::ldexp(mantissa(random), exponent(random));
      switch (special(random)) {
        case 0:
          number = NAN;
          break;
        case 1:
          number = INFINITY;
          break;
        case 2:
          number = -INFINITY;
          break;
        case 3:
          number = -0.0;
          break;
        case 4:
          number = std::is_same_v<Tag, Float16Tag> ? std::ldexp(1.0, -24)
                   : std::is_same_v<S, double>     ? 1e-310
                                                   : 1e-40;  // subnormal
          break;
        default:
          break;
      }
      value = fromCompute<Tag>(static_cast<float>(number));
      if constexpr (std::is_same_v<S, double>) {
        value = number;
      }
    }
  }
  return data;
}

// Large buffers repeat a random pool from a random start, which keeps generation cheap; the
// kernels are element-wise, so what large counts test is the loops, not more value pairs.
template <typename Tag>
std::vector<StorageOf<Tag>> makeData(size_t count, std::mt19937_64& random) {
  constexpr size_t kPool = 65537;
  if (count <= kPool) {
    return makeRandomData<Tag>(count, random);
  }
  auto pool = makeRandomData<Tag>(kPool, random);
  std::vector<StorageOf<Tag>> data(count);
  size_t start = random() % kPool;
  for (size_t i = 0; i < count; ++i) {
    data[i] = pool[(start + i) % kPool];
  }
  return data;
}

// ---- Parameterization ------------------------------------------------------------------------

struct KernelCase {
  kernels::Isa isa;
  DataType dtype;
  ReduceOp op;
};

std::vector<KernelCase> validCases() {
  std::vector<KernelCase> cases;
  for (auto isa : supportedIsas()) {
    for (auto dtype : kAllDataTypes) {
      for (auto op : kAllReduceOps) {
        if (isValidReduction(op, dtype)) {
          cases.push_back({isa, dtype, op});
        }
      }
    }
  }
  return cases;
}

std::string caseName(const ::testing::TestParamInfo<KernelCase>& info) {
  return std::string(kernels::toString(info.param.isa)) + "_" +
         std::string(toString(info.param.dtype)) + "_" + std::string(toString(info.param.op));
}

class ReduceKernelTest : public ::testing::TestWithParam<KernelCase> {};

// reduceInto over separate, unaligned buffers, and in place (dst == src).
template <typename Tag>
void checkReduceInto(DataType dtype, ReduceOp op) {
  using S = StorageOf<Tag>;
  std::mt19937_64 random(static_cast<uint64_t>(dtype) * 131 + static_cast<uint64_t>(op));
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000003}}) {
    constexpr size_t kDstOffset = 1, kSrcOffset = 3;  // misaligned, differently
    auto dst = makeData<Tag>(count + kDstOffset + 1, random);
    auto src = makeData<Tag>(count + kSrcOffset, random);
    auto before = dst;
    kernels::reduceInto(op, dtype, dst.data() + kDstOffset, src.data() + kSrcOffset, count);
    for (size_t i = 0; i < count; ++i) {
      const S pair[] = {before[i + kDstOffset], src[i + kSrcOffset]};
      S expected = referenceReduce<Tag>(op, pair);
      ASSERT_TRUE(sameResult<Tag>(op, dst[i + kDstOffset], expected))
          << "count " << count << " element " << i;
    }
    EXPECT_EQ(std::memcmp(&dst[0], &before[0], sizeof(S)), 0) << "wrote before dst";
    EXPECT_EQ(std::memcmp(&dst[count + kDstOffset], &before[count + kDstOffset], sizeof(S)), 0)
        << "wrote past dst";

    size_t selfCount = std::min<size_t>(count, 10007);  // in place: dst == src
    auto self = makeData<Tag>(selfCount + 1, random);
    auto selfBefore = self;
    kernels::reduceInto(op, dtype, self.data() + 1, self.data() + 1, selfCount);
    for (size_t i = 0; i < selfCount; ++i) {
      const S pair[] = {selfBefore[i + 1], selfBefore[i + 1]};
      S expected = referenceReduce<Tag>(op, pair);
      ASSERT_TRUE(sameResult<Tag>(op, self[i + 1], expected)) << "in place, element " << i;
    }
  }
}

TEST_P(ReduceKernelTest, ReduceIntoMatchesReference) {
  ScopedIsa isa(GetParam().isa);
  visitDataType(GetParam().dtype,
                [&](auto tag) { checkReduceInto<decltype(tag)>(GetParam().dtype, GetParam().op); });
}

enum class Alias { kNone, kFirst, kLast };

// reduceMany with 1..8 sources; dst separate, equal to the first source, or to the last.
template <typename Tag>
void checkReduceMany(DataType dtype, ReduceOp op) {
  using S = StorageOf<Tag>;
  std::mt19937_64 random(static_cast<uint64_t>(dtype) * 977 + static_cast<uint64_t>(op));
  // Around the kernels' block sizes (512 floats for halves, 8 KiB otherwise).
  const size_t counts[] = {0, 1, 7, 513, 2053, 8201};
  for (size_t numSrcs = 1; numSrcs <= 8; ++numSrcs) {
    for (size_t count : counts) {
      for (Alias alias : {Alias::kNone, Alias::kFirst, Alias::kLast}) {
        std::vector<std::vector<S>> sources;
        for (size_t k = 0; k < numSrcs; ++k) {
          sources.push_back(makeData<Tag>(count + 1, random));
        }
        auto original = sources;
        std::vector<S> separate = makeData<Tag>(count + 1, random);
        std::vector<const void*> pointers;
        for (auto& source : sources) {
          pointers.push_back(source.data() + 1);
        }
        S* dst = alias == Alias::kNone    ? separate.data() + 1
                 : alias == Alias::kFirst ? sources.front().data() + 1
                                          : sources.back().data() + 1;
        kernels::reduceMany(op, dtype, dst, pointers, count);
        std::vector<S> column(numSrcs);
        for (size_t i = 0; i < count; ++i) {
          for (size_t k = 0; k < numSrcs; ++k) {
            column[k] = original[k][i + 1];
          }
          S expected = referenceReduce<Tag>(op, std::span<const S>(column));
          ASSERT_TRUE(sameResult<Tag>(op, dst[i], expected))
              << numSrcs << " sources, count " << count << ", alias " << static_cast<int>(alias)
              << ", element " << i;
        }
      }
    }
  }
}

TEST_P(ReduceKernelTest, ReduceManyMatchesReference) {
  ScopedIsa isa(GetParam().isa);
  visitDataType(GetParam().dtype,
                [&](auto tag) { checkReduceMany<decltype(tag)>(GetParam().dtype, GetParam().op); });
}

INSTANTIATE_TEST_SUITE_P(AllValid, ReduceKernelTest, ::testing::ValuesIn(validCases()), caseName);

// ---- divideBy ------------------------------------------------------------------------------

class DivideTest : public ::testing::TestWithParam<kernels::Isa> {};

template <typename Tag>
StorageOf<Tag> referenceDivide(StorageOf<Tag> value, int64_t divisor) {
  using S = StorageOf<Tag>;
  if constexpr (kIsHalfTag<Tag>) {
    double quotient = referenceDecode(value, Tag::format) / static_cast<double>(divisor);
    return std::isnan(quotient) ? static_cast<S>(Tag::format.infinityBits() | 1u)
                                : static_cast<S>(referenceEncode(quotient, Tag::format));
  } else if constexpr (kIsComplexTag<Tag>) {
    using F = typename S::value_type;
    return S(value.real() / static_cast<F>(divisor), value.imag() / static_cast<F>(divisor));
  } else if constexpr (std::is_floating_point_v<S>) {
    return value / static_cast<S>(divisor);  // IEEE division rounds once
  } else if constexpr (std::is_unsigned_v<S>) {
    return static_cast<S>(static_cast<uint64_t>(value) / static_cast<uint64_t>(divisor));
  } else {
    return static_cast<S>(static_cast<int64_t>(value) / divisor);
  }
}

TEST_P(DivideTest, MatchesReference) {
  ScopedIsa isa(GetParam());
  for (auto dtype : kAllDataTypes) {
    if (dtype == DataType::kBool) {
      continue;
    }
    visitDataType(dtype, [&](auto tag) {
      using Tag = decltype(tag);
      std::mt19937_64 random(static_cast<uint64_t>(dtype));
      for (int64_t divisor : {1, 2, 3, 7, 1000}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{10007}}) {
          auto data = makeData<Tag>(count + 1, random);
          auto before = data;
          kernels::divideBy(dtype, data.data() + 1, count, divisor);
          for (size_t i = 0; i < count; ++i) {
            ASSERT_TRUE(sameResult<Tag>(ReduceOp::kSum, data[i + 1],
                                        referenceDivide<Tag>(before[i + 1], divisor)))
                << toString(dtype) << " / " << divisor << " element " << i;
          }
        }
      }
    });
  }
}

TEST_P(DivideTest, IntegersTruncateTowardZero) {
  ScopedIsa isa(GetParam());
  int32_t values[] = {-7, 7, -1, 5, -6};
  kernels::divideBy(DataType::kInt32, values, 5, 2);
  EXPECT_EQ(std::vector<int32_t>(values, values + 5), (std::vector<int32_t>{-3, 3, 0, 2, -3}));
  int8_t small[] = {-128, 127};
  kernels::divideBy(DataType::kInt8, small, 2, 3);
  EXPECT_EQ(small[0], -42);
  EXPECT_EQ(small[1], 42);
}

TEST_P(DivideTest, RejectsBoolAndNonPositiveDivisors) {
  ScopedIsa isa(GetParam());
  float values[2] = {1, 2};
  uint8_t flags[2] = {1, 0};
  EXPECT_THROW(kernels::divideBy(DataType::kBool, flags, 2, 2), InvalidArgumentError);
  EXPECT_THROW(kernels::divideBy(DataType::kFloat32, values, 2, 0), InvalidArgumentError);
  EXPECT_THROW(kernels::divideBy(DataType::kFloat32, values, 2, -2), InvalidArgumentError);
}

INSTANTIATE_TEST_SUITE_P(AllIsas,
                         DivideTest,
                         ::testing::ValuesIn(supportedIsas()),
                         [](const auto& info) {
                           return std::string(kernels::toString(info.param));
                         });

// ---- Invalid requests ----------------------------------------------------------------------

TEST(ReduceKernelErrorsTest, InvalidCombinationsThrow) {
  alignas(8) uint8_t dst[16] = {}, src[16] = {};
  const void* srcs[2] = {dst, src};
  int invalid = 0;
  for (auto dtype : kAllDataTypes) {
    for (auto op : kAllReduceOps) {
      if (isValidReduction(op, dtype)) {
        continue;
      }
      ++invalid;
      EXPECT_THROW(kernels::reduceInto(op, dtype, dst, src, 1), InvalidArgumentError)
          << toString(op) << " on " << toString(dtype);
      EXPECT_THROW(kernels::reduceMany(op, dtype, dst, srcs, 1), InvalidArgumentError);
    }
  }
  // band/bor/bxor on 4 float and 2 complex types, min/max on the complex ones, avg on bool.
  EXPECT_EQ(invalid, 6 * 3 + 2 * 2 + 1);
}

TEST(ReduceKernelErrorsTest, BadBuffersThrow) {
  float dst[4] = {}, src[4] = {};
  EXPECT_THROW(kernels::reduceMany(ReduceOp::kSum, DataType::kFloat32, dst, {}, 4),
               InvalidArgumentError);
  EXPECT_THROW(kernels::reduceInto(ReduceOp::kSum, DataType::kFloat32, nullptr, src, 4),
               InvalidArgumentError);
  EXPECT_THROW(kernels::reduceInto(ReduceOp::kSum, DataType::kFloat32, dst, nullptr, 4),
               InvalidArgumentError);
  EXPECT_NO_THROW(kernels::reduceInto(ReduceOp::kSum, DataType::kFloat32, nullptr, nullptr, 0));
  EXPECT_THROW(kernels::reduceInto(static_cast<ReduceOp>(42), DataType::kFloat32, dst, src, 4),
               InvalidArgumentError);
}

TEST(ReduceKernelErrorsTest, OverrideRejectsUnsupportedIsa) {
  for (auto isa : {kernels::Isa::kGeneric, kernels::Isa::kAvx2}) {
    if (!kernels::isaSupported(isa)) {
      EXPECT_THROW(kernels::overrideIsa(isa), InvalidArgumentError);
    }
  }
  EXPECT_TRUE(kernels::isaSupported(kernels::Isa::kGeneric));
}

}  // namespace
}  // namespace chorus::test
