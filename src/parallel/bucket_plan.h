// parallel/bucket_plan.h — how gradients are packed into buckets for the data-parallel reducer.
//
// Contract:
//  - planBuckets() is pure: the same specs, order and limits give the same plan on every rank.
//  - Gradients are taken in `readyOrder` (the order backward is expected to produce them); each
//    bucket holds gradients of one dtype only, so one allreduce covers it. A bucket is closed as
//    soon as it holds at least its limit: the first bucket of each dtype `firstBucketBytes` (small,
//    so that communication starts early in backward), the others `bucketBytes`. So a gradient
//    larger than the limit ends the bucket it joins; no gradient is ever split.
//  - Buckets are ordered by the position of their first gradient in readyOrder, which is the order
//    in which they can start; buckets of different dtypes interleave accordingly.
//  - Within a bucket, each gradient starts at an element offset aligned to kSlotAlignmentBytes
//    (padding stays zero), so every gradient view is aligned for vector loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chorus/gradient_reducer.h"
#include "chorus/types.h"

namespace chorus::parallel {

inline constexpr size_t kSlotAlignmentBytes = 64;

// Where one gradient lives in its bucket.
struct BucketSlot {
  int gradient = 0;    // index into the specs
  int64_t offset = 0;  // in elements, from the bucket's start
  int64_t numel = 0;

  bool operator==(const BucketSlot&) const = default;
};

struct Bucket {
  DataType dtype = DataType::kFloat32;
  int64_t numel = 0;  // slots plus alignment padding
  std::vector<BucketSlot> slots;

  size_t nbytes() const { return static_cast<size_t>(numel) * dataTypeSize(dtype); }
  bool operator==(const Bucket&) const = default;
};

struct BucketLimits {
  size_t bucketBytes = 0;
  size_t firstBucketBytes = 0;
};

// The buckets for gradients `specs` taken in `readyOrder` (a permutation of 0..specs.size()-1;
// anything else is InvalidArgumentError). Zero limits are InvalidArgumentError.
std::vector<Bucket> planBuckets(const std::vector<GradientSpec>& specs,
                                const std::vector<int>& readyOrder,
                                const BucketLimits& limits);

// 0..n-1 reversed: backward produces the last registered parameter's gradient first.
std::vector<int> reverseOrder(int n);

}  // namespace chorus::parallel
