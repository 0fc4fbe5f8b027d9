// The shm backend's reducing collectives: allreduce, reduce, reduce_scatter (see shm_backend.h).
//
// Small vectors (a rank's whole contribution fits ShmGroup::kSmallSlotBytes): the data travels in
// the arrival round, then each rank that needs a result reduces the p small slots in rank order.
// One synchronization; every rank computes the same sums in the same order, so allreduce results
// are bit-identical across ranks.
//
// allreduce and reduce, larger: a pipeline of chunks of ShmGroup::kChunkSlotBytes (cache-sized).
// For chunk step s (counted over the communicator's life), using slot parity s & 1:
//   1. once every rank has finished step s - 2 (the last reader of this slot), copy the chunk in;
//   2. once every rank has copied, reduce this rank's 1/p slice of the chunk straight out of the
//      p slots, in place in this rank's slot (this rank's own slot first, then the others by rank);
//   3. once every rank has reduced, copy all p reduced slices out into the output (reduce: only
//      the root).
// Per element a rank reads its input once and writes its output once in main memory; the slot
// traffic (copy in, p-way reduce of 1/p, copy out) stays in the shared cache. Each slice is
// reduced by one rank and copied by all, so results are bit-identical across ranks. Three waits
// per chunk, each a store and a few cache-line reads when ranks keep pace.
//
// avg (allreduce only; allreduceAverages()): combined like sum, and each slice is divided by p
// right after its reduction, by the rank that reduced it (so results stay bit-identical).
//
// reduce_scatter, larger: each step carries, for every block q, the same range of elements of
// block q, as piece q of the slot; rank r reduces piece r of every slot into its output.
#include <algorithm>

#include "backend/shm/shm_backend.h"
#include "core/copy_bytes.h"
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

void ShmBackend::allreduce(const CallContext& call, const AllreduceArgs& args) {
  guarded([&] {
    const size_t bytes = args.count * dataTypeSize(args.dtype);
    if (bytes > ShmGroup::kSmallSlotBytes) {
      arrive(call);
      reduceChunked(call, args.input, args.output, args.count, args.dtype, args.op, kEveryRank);
      return;
    }
    const uint64_t sequence = arrive(call, args.input, bytes);
    if (args.count == 0)
      return;
    for (int q = 0; q < size(); ++q) sources_[q] = group_->arrivalData(q, sequence, bytes);
    kernels::reduceMany(args.op, args.dtype, args.output, sources_, args.count);
    if (args.op == ReduceOp::kAvg)
      kernels::divideBy(args.dtype, args.output, args.count, size());
  });
}

void ShmBackend::reduce(const CallContext& call, const ReduceArgs& args) {
  guarded([&] {
    const size_t bytes = args.count * dataTypeSize(args.dtype);
    if (bytes > ShmGroup::kSmallSlotBytes) {
      arrive(call);
      reduceChunked(call, args.input, args.output, args.count, args.dtype, args.op, args.root);
      return;
    }
    const uint64_t sequence = arrive(call, args.input, bytes);
    if (args.count == 0 || rank() != args.root)
      return;
    for (int q = 0; q < size(); ++q) sources_[q] = group_->arrivalData(q, sequence, bytes);
    kernels::reduceMany(args.op, args.dtype, args.output, sources_, args.count);
  });
}

void ShmBackend::reduceChunked(const CallContext& call,
                               const void* input,
                               void* output,
                               size_t count,
                               DataType dtype,
                               ReduceOp op,
                               int outputRank) {
  const size_t elementSize = dataTypeSize(dtype);
  const size_t chunkElements = ShmGroup::kChunkSlotBytes / elementSize;
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  const int me = rank();
  const int p = size();
  const bool copiesOut = outputRank == kEveryRank || outputRank == me;
  auto chunk = [&](size_t i) { return std::min(chunkElements, count - i * chunkElements); };
  exchangeChunks(
      call, ceilDiv(count, chunkElements),
      [&](size_t i, std::byte* slot) {
        copyBytes(slot, in + i * chunkElements * elementSize, chunk(i) * elementSize);
      },
      [&](size_t i, uint64_t parity) {
        for (int q = 0; copiesOut && q < p; ++q) {
          const auto [from, to] = sliceOf(chunk(i), p, q);
          copyBytes(out + (i * chunkElements + from) * elementSize,
                    group_->chunkSlot(q, parity) + from * elementSize, (to - from) * elementSize);
        }
      },
      [&](size_t i, uint64_t parity) {
        const auto [begin, end] = sliceOf(chunk(i), p, me);
        if (end == begin)
          return;
        std::byte* mine = group_->chunkSlot(me, parity) + begin * elementSize;
        sources_[0] = mine;
        for (int q = 0, next = 1; q < p; ++q) {
          if (q != me)
            sources_[next++] = group_->chunkSlot(q, parity) + begin * elementSize;
        }
        kernels::reduceMany(op, dtype, mine, sources_, end - begin);
        if (op == ReduceOp::kAvg)  // while the slice is in cache, not as a pass over the output
          kernels::divideBy(dtype, mine, end - begin, p);
      });
}

void ShmBackend::reduceScatter(const CallContext& call, const ReduceScatterArgs& args) {
  guarded([&] {
    const size_t elementSize = dataTypeSize(args.dtype);
    const size_t blockBytes = args.countPerRank * elementSize;
    const int me = rank();
    const int p = size();
    const auto* in = static_cast<const std::byte*>(args.input);
    auto* out = static_cast<std::byte*>(args.output);
    if (blockBytes * p <= ShmGroup::kSmallSlotBytes) {
      const uint64_t sequence = arrive(call, in, blockBytes * p);
      if (args.countPerRank == 0)
        return;
      for (int q = 0; q < p; ++q)
        sources_[q] = group_->arrivalData(q, sequence, blockBytes * p) + me * blockBytes;
      kernels::reduceMany(args.op, args.dtype, out, sources_, args.countPerRank);
      return;
    }
    arrive(call);
    // Step i carries elements [i * m, i * m + n) of every block; piece q of a slot is block q's.
    const size_t m = pieceBytes(p) / elementSize;
    auto piece = [&](size_t i) { return std::min(m, args.countPerRank - i * m); };
    exchangeChunks(
        call, ceilDiv(args.countPerRank, m),
        [&](size_t i, std::byte* slot) {
          for (int q = 0; q < p; ++q) {
            copyBytes(slot + q * m * elementSize,
                      in + (q * args.countPerRank + i * m) * elementSize, piece(i) * elementSize);
          }
        },
        [&](size_t i, uint64_t parity) {
          for (int q = 0; q < p; ++q)
            sources_[q] = group_->chunkSlot(q, parity) + me * m * elementSize;
          kernels::reduceMany(args.op, args.dtype, out + i * m * elementSize, sources_, piece(i));
        });
  });
}

}  // namespace chorus::backend::shm
