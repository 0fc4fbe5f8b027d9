// The shm backend's native allreduce (see shm_backend.h).
//
// Small vectors (up to ShmGroup::kSmallSlotBytes): the data travels in the arrival round, then
// every rank reduces the p slots in rank order into its buffer. One synchronization; every rank
// computes the same sums in the same order, so results are bit-identical across ranks.
//
// Larger vectors: a pipeline of chunks of ShmGroup::kChunkSlotBytes (cache-sized). For chunk step s
// (counted over the communicator's life), using slot parity s & 1:
//   1. once every rank has finished step s - 2 (the last reader of this slot), copy the chunk in;
//   2. once every rank has copied, reduce this rank's 1/p slice of the chunk straight out of the
//      p slots, in place in this rank's slot (this rank's own slot first, then the others by rank);
//   3. once every rank has reduced, copy all p reduced slices out into the buffer.
// Per element a rank reads its input once and writes its output once in main memory; the slot
// traffic (copy in, p-way reduce of 1/p, copy out) stays in the shared cache. Each slice is
// reduced by one rank and copied by all, so results are bit-identical across ranks. Three waits
// per chunk, each a store and a few cache-line reads when ranks keep pace.
#include <algorithm>
#include <cstring>

#include "backend/shm/shm_backend.h"
#include "core/reduce_kernels.h"

namespace chorus::backend::shm {
namespace {

// Elements [begin, end) of slice `index` when `count` elements are cut into `parts` near-equal
// slices.
std::pair<size_t, size_t> sliceOf(size_t count, int parts, int index) {
  const size_t p = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  return {count * i / p, count * (i + 1) / p};
}

}  // namespace

void ShmBackend::allreduceSmall(const CallContext& call, const algorithms::AllreduceArgs& args) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  const uint64_t sequence = arrive(call, args.data, bytes);
  if (args.count == 0)
    return;
  for (int q = 0; q < size(); ++q) sources_[q] = group_->smallSlot(q, sequence);
  kernels::reduceMany(args.op, args.dtype, args.data, sources_, args.count);
}

void ShmBackend::allreduceChunked(const CallContext& call, const algorithms::AllreduceArgs& args) {
  arrive(call, nullptr, 0);
  const size_t elementSize = dataTypeSize(args.dtype);
  const size_t chunkElements = ShmGroup::kChunkSlotBytes / elementSize;
  auto* data = static_cast<std::byte*>(args.data);
  const int me = rank();
  const int p = size();
  for (size_t offset = 0; offset < args.count; offset += chunkElements) {
    const size_t n = std::min(chunkElements, args.count - offset);
    std::byte* chunk = data + offset * elementSize;
    const uint64_t step = chunkSteps_;
    if (step >= 2)
      group_->waitAll(Step::kDone, step - 1, call.deadline);
    std::memcpy(group_->chunkSlot(me, step), chunk, n * elementSize);
    group_->publish(Step::kCopied, step + 1);
    group_->waitAll(Step::kCopied, step + 1, call.deadline);

    const auto [begin, end] = sliceOf(n, p, me);
    if (end > begin) {
      sources_[0] = group_->chunkSlot(me, step) + begin * elementSize;
      for (int q = 0, next = 1; q < p; ++q) {
        if (q != me)
          sources_[next++] = group_->chunkSlot(q, step) + begin * elementSize;
      }
      kernels::reduceMany(args.op, args.dtype, group_->chunkSlot(me, step) + begin * elementSize,
                          sources_, end - begin);
    }
    group_->publish(Step::kReduced, step + 1);
    group_->waitAll(Step::kReduced, step + 1, call.deadline);

    for (int q = 0; q < p; ++q) {
      const auto [from, to] = sliceOf(n, p, q);
      std::memcpy(chunk + from * elementSize, group_->chunkSlot(q, step) + from * elementSize,
                  (to - from) * elementSize);
    }
    group_->publish(Step::kDone, step + 1);
    chunkSteps_ = step + 1;
  }
}

}  // namespace chorus::backend::shm
