// gradient_wire (parallel/gradient_wire.h): dividing and narrowing, then widening and adding, over
// more than two 64 KiB chunks and an odd tail, for both wire dtypes. Values are small integers
// times the divisor, so every quotient, narrowing and sum is exact and compared exactly.
#include "parallel/gradient_wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace chorus::parallel {
namespace {

TEST(GradientWire, NarrowsTheQuotientsAndAddsThemBackWidenedAcrossChunks) {
  constexpr size_t kCount = 2 * 16384 + 5;
  constexpr int kDivisor = 3;
  for (DataType wire : {DataType::kBFloat16, DataType::kFloat16}) {
    std::vector<float> values(kCount), into(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      values[i] = static_cast<float>(kDivisor * (static_cast<int>(i % 11) - 5));
      into[i] = static_cast<float>(i % 4);
    }
    std::vector<uint16_t> narrowed(kCount, 0xFFFF);
    narrowDivided(wire, values.data(), narrowed.data(), kCount, kDivisor);
    addWidened(wire, reinterpret_cast<const std::byte*>(narrowed.data()), into.data(), kCount);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(into[i],
                static_cast<float>(i % 4) + static_cast<float>(static_cast<int>(i % 11) - 5))
          << toString(wire) << " element " << i;
    }
  }
}

}  // namespace
}  // namespace chorus::parallel
