// chorus/gradient_reducer.h — GradientReducer: data-parallel gradient averaging in buckets,
// overlapped with backward.
//
// Contract:
//  - Every rank of `comm` constructs the reducer with the same gradient specs (element count and
//    dtype per gradient, in parameter registration order) and the same limits. Construction
//    communicates nothing.
//  - Gradient i lives at gradient(i): a contiguous view into a bucket buffer the reducer owns, zero
//    at first. Frameworks make the view the parameter's gradient, so backward accumulates into the
//    bucket and nothing is copied. storage(i) keeps that memory alive for as long as it is held,
//    even after a rebuild or the reducer's destruction.
//  - One iteration: markReady(i) as backward produces each gradient (at most once per iteration),
//    then finalize(). Buckets start in their plan order: a bucket's allreduce (avg) is issued, and
//    runs on the communicator's worker thread while the caller goes on, as soon as all its
//    gradients are ready and every earlier bucket has been issued.
//  - finalize() treats every gradient not marked in this iteration as absent on this rank: its
//    view is zeroed, so it contributes nothing to the average. It issues the remaining buckets,
//    agrees with the other ranks on which gradients were present anywhere, waits for everything,
//    and returns that (usedAnywhere()[i]). Afterwards every view holds the average over ranks.
//  - After the first finalize() the buckets are rebuilt once to follow the order in which rank 0's
//    gradients became ready (every rank adopts rank 0's, so plans stay equal). When that order
//    differs from the plan, views move to new buffers (generation() grows; averaged values are
//    carried over), and callers must fetch gradient(i) again.
//  - float16 and bfloat16 gradients are averaged with float32 accumulation (Communicator).
//  - Errors: markReady() twice for one gradient in an iteration, or an index out of range, is
//    InvalidArgumentError. Communication errors (PeerError, TimeoutError, MismatchError when ranks
//    disagree on the specs) are raised by finalize(), after which the reducer is unusable.
//  - Communication hooks (issueBuckets = false): the reducer issues nothing for the buckets. As
//    they become ready, in plan order, takeReadyBuckets() hands their indices out once each; the
//    caller reduces bucket(b) itself (a DDP communication hook) and writes the result there. At the
//    end of backward, markAbsent() zeroes the gradients not marked (their buckets become ready and
//    are handed out too); once every bucket is reduced, finalize() agrees on the gradients present
//    anywhere and rebuilds the buckets as above (a rebuild keeps bucket(b)'s values).
//  - Memory held by the caller (ownsMemory = false, with issueBuckets = false): the reducer keeps
//  the
//    plan and the bookkeeping only, and allocates nothing. The caller lays its own buffers out as
//    location(i), bucketNumel(b) and bucketDtype(b) say (device memory, say: chorus.torch's DDP of
//    a CUDA model holds its buckets in torch's allocator), zeroes the gradients not marked before
//    markAbsent(), and after a rebuild (generation() grew) moves the values to the new locations.
//    gradient(), bucket(), storage() and markReady(i, values) are then InvalidArgumentError.
//  - Not thread-safe: one thread (backward's) calls markReady() and finalize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/tensor.h"

namespace chorus {

struct GradientSpec {
  int64_t numel = 0;
  DataType dtype = DataType::kFloat32;
};

struct GradientReducerOptions {
  // Limit of each bucket (DistConfig::bucketBytes, CHORUS_BUCKET_MB: 25 MiB).
  size_t bucketBytes = size_t{25} << 20;
  // Limit of the first bucket, small so that communication starts early (1 MiB).
  size_t firstBucketBytes = size_t{1} << 20;
  // Rebuild the buckets after the first iteration to follow the observed ready order.
  bool rebuildAfterFirstIteration = true;
  // Whether the reducer allreduces each bucket itself; false: the caller does (see the contract).
  bool issueBuckets = true;
  // Whether the reducer allocates the buckets; false: the caller does (see the contract).
  bool ownsMemory = true;
};

// Where gradient i lives: in bucket `bucket`, from element `offset` on.
struct GradientLocation {
  int bucket = 0;
  int64_t offset = 0;
};

class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<Communicator> comm,
                  std::vector<GradientSpec> specs,
                  GradientReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  int numGradients() const;
  int numBuckets() const;
  // Bytes in bucket b (gradients plus alignment padding); the buckets in plan order.
  size_t bucketBytes(int bucket) const;
  // The gradient indices in bucket b, in their order inside it.
  std::vector<int> bucketGradients(int bucket) const;
  // Bucket b's elements (gradients plus alignment padding) and their dtype.
  int64_t bucketNumel(int bucket) const;
  DataType bucketDtype(int bucket) const;
  GradientLocation location(int index) const;

  Tensor gradient(int index) const;
  // Bucket b's whole buffer, flat (its gradients at their offsets, and alignment padding).
  Tensor bucket(int bucket) const;
  std::shared_ptr<const void> storage(int index) const;
  // Grows by one whenever the views move (a rebuild).
  int generation() const;

  void markReady(int index);
  // Copies `values` (same numel and dtype, contiguous) into gradient(index), then markReady(index):
  // for a gradient that backward wrote somewhere else.
  void markReady(int index, const Tensor& values);
  // Whether gradient i was marked ready in the current iteration.
  bool isReady(int index) const;
  // How many buckets of the current iteration have been issued so far.
  int bucketsIssued() const;

  // With issueBuckets = false: the buckets that became ready since the last call, in plan order.
  std::vector<int> takeReadyBuckets();
  // Zeroes the gradients not marked in this iteration (they count as absent on this rank), once per
  // iteration; finalize() does it too.
  void markAbsent();
  const std::vector<bool>& finalize();
  // From the last finalize(): whether gradient i was present on at least one rank.
  const std::vector<bool>& usedAnywhere() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
