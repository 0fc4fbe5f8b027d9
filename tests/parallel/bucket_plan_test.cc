// planBuckets: which gradients share a bucket, in which order, at which offsets.
#include "parallel/bucket_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::vector<GradientSpec> floats(std::vector<int64_t> numels) {
  std::vector<GradientSpec> specs;
  for (auto n : numels) specs.push_back({n, DataType::kFloat32});
  return specs;
}

std::vector<std::vector<int>> gradientsOf(const std::vector<Bucket>& buckets) {
  std::vector<std::vector<int>> out;
  for (const auto& b : buckets) {
    out.emplace_back();
    for (const auto& slot : b.slots) out.back().push_back(slot.gradient);
  }
  return out;
}

TEST(BucketPlanTest, ReverseOrderWithASmallFirstBucket) {
  // Eight gradients of 256 Ki floats (1 MiB each), limits 1 MiB first, then 3 MiB.
  auto specs = floats({262144, 262144, 262144, 262144, 262144, 262144, 262144, 262144});
  auto buckets = planBuckets(specs, reverseOrder(8), {3 * kMiB, 1 * kMiB});
  std::vector<std::vector<int>> expected = {{7}, {6, 5, 4}, {3, 2, 1}, {0}};
  EXPECT_EQ(gradientsOf(buckets), expected);
  EXPECT_EQ(buckets[1].nbytes(), 3 * kMiB);
  EXPECT_EQ(buckets[3].nbytes(), 1 * kMiB);  // the rest, under the limit
}

TEST(BucketPlanTest, AGradientLargerThanTheLimitEndsItsBucket) {
  auto specs = floats({10, 1 << 20, 10});  // 4 MiB in the middle
  auto buckets = planBuckets(specs, {2, 1, 0}, {kMiB, kMiB});
  std::vector<std::vector<int>> expected = {{2, 1}, {0}};
  EXPECT_EQ(gradientsOf(buckets), expected);
  EXPECT_EQ(buckets[0].slots[1].numel, 1 << 20);
}

TEST(BucketPlanTest, SlotsAreAlignedAndPaddingIsCounted) {
  auto specs = floats({3, 5, 17});
  auto buckets = planBuckets(specs, {0, 1, 2}, {kMiB, kMiB});
  ASSERT_EQ(buckets.size(), 1u);
  const auto& slots = buckets[0].slots;
  EXPECT_EQ(slots[0].offset, 0);
  EXPECT_EQ(slots[1].offset, 16);  // 64 bytes of float32
  EXPECT_EQ(slots[2].offset, 32);
  EXPECT_EQ(buckets[0].numel, 32 + 17);
  for (const auto& slot : slots)
    EXPECT_EQ(slot.offset * 4 % static_cast<int64_t>(kSlotAlignmentBytes), 0);
}

TEST(BucketPlanTest, EachDtypeHasItsOwnBucketsOrderedByFirstReadyGradient) {
  std::vector<GradientSpec> specs = {{100, DataType::kFloat32},
                                     {100, DataType::kBFloat16},
                                     {100, DataType::kFloat32},
                                     {100, DataType::kBFloat16}};
  auto buckets = planBuckets(specs, {1, 0, 3, 2}, {kMiB, kMiB});
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].dtype, DataType::kBFloat16);  // gradient 1 is ready first
  EXPECT_EQ(gradientsOf(buckets), (std::vector<std::vector<int>>{{1, 3}, {0, 2}}));
  EXPECT_EQ(buckets[1].dtype, DataType::kFloat32);
}

TEST(BucketPlanTest, EveryGradientIsPlacedExactlyOnceWithoutOverlap) {
  std::vector<int64_t> numels;
  for (int i = 0; i < 50; ++i) numels.push_back(1 + (i * 7919) % 40000);
  auto specs = floats(numels);
  auto buckets = planBuckets(specs, reverseOrder(50), {64 * 1024, 16 * 1024});
  std::vector<int> seen(50, 0);
  for (const auto& bucket : buckets) {
    int64_t end = 0;
    for (const auto& slot : bucket.slots) {
      ++seen[slot.gradient];
      EXPECT_GE(slot.offset, end);  // no overlap, in order
      EXPECT_EQ(slot.numel, numels[slot.gradient]);
      end = slot.offset + slot.numel;
    }
    EXPECT_EQ(bucket.numel, end);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST(BucketPlanTest, BadOrdersAndLimitsAreRefused) {
  auto specs = floats({1, 2, 3});
  EXPECT_THROW(planBuckets(specs, {0, 1}, {kMiB, kMiB}), InvalidArgumentError);
  EXPECT_THROW(planBuckets(specs, {0, 1, 1}, {kMiB, kMiB}), InvalidArgumentError);
  EXPECT_THROW(planBuckets(specs, {0, 1, 3}, {kMiB, kMiB}), InvalidArgumentError);
  EXPECT_THROW(planBuckets(specs, {0, 1, 2}, {0, kMiB}), InvalidArgumentError);
  EXPECT_TRUE(planBuckets({}, {}, {kMiB, kMiB}).empty());
}

}  // namespace
}  // namespace chorus::parallel
