#include "parallel/bucket_plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

void checkPermutation(const std::vector<int>& order, size_t n) {
  if (order.size() != n)
    throw InvalidArgumentError("bucket plan: the ready order has " + std::to_string(order.size()) +
                               " entries for " + std::to_string(n) + " gradients");
  std::vector<bool> seen(n, false);
  for (int index : order) {
    if (index < 0 || static_cast<size_t>(index) >= n || seen[index])
      throw InvalidArgumentError("bucket plan: the ready order is not a permutation of 0.." +
                                 std::to_string(n - 1) + " (entry " + std::to_string(index) + ")");
    seen[index] = true;
  }
}

int64_t alignedOffset(int64_t offset, DataType dtype) {
  auto perSlot = static_cast<int64_t>(kSlotAlignmentBytes / dataTypeSize(dtype));
  return (offset + perSlot - 1) / perSlot * perSlot;
}

}  // namespace

std::vector<int> reverseOrder(int n) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

std::vector<Bucket> planBuckets(const std::vector<GradientSpec>& specs,
                                const std::vector<int>& readyOrder,
                                const BucketLimits& limits) {
  if (limits.bucketBytes == 0 || limits.firstBucketBytes == 0)
    throw InvalidArgumentError("bucket plan: bucket sizes must be positive");
  checkPermutation(readyOrder, specs.size());

  std::vector<Bucket> closed;
  std::map<DataType, Bucket> open;        // the bucket being filled, per dtype
  std::map<DataType, bool> closedBefore;  // whether this dtype has closed a bucket yet
  for (int index : readyOrder) {
    const GradientSpec& spec = specs[index];
    if (spec.numel < 0)
      throw InvalidArgumentError("bucket plan: gradient " + std::to_string(index) +
                                 " has a negative size");
    Bucket& bucket = open[spec.dtype];
    bucket.dtype = spec.dtype;
    int64_t offset = alignedOffset(bucket.numel, spec.dtype);
    bucket.slots.push_back({index, offset, spec.numel});
    bucket.numel = offset + spec.numel;
    size_t limit = closedBefore[spec.dtype] ? limits.bucketBytes : limits.firstBucketBytes;
    if (bucket.nbytes() >= limit) {
      closed.push_back(std::move(bucket));
      open.erase(spec.dtype);
      closedBefore[spec.dtype] = true;
    }
  }
  for (auto& [dtype, bucket] : open) closed.push_back(std::move(bucket));

  std::vector<size_t> position(specs.size());
  for (size_t i = 0; i < readyOrder.size(); ++i) position[readyOrder[i]] = i;
  std::stable_sort(closed.begin(), closed.end(), [&](const Bucket& a, const Bucket& b) {
    return position[a.slots.front().gradient] < position[b.slots.front().gradient];
  });
  return closed;
}

}  // namespace chorus::parallel
