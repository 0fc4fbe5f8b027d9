// The shm backend's data-moving collectives: allgather, gather, broadcast, scatter, all_to_all
// (see shm_backend.h).
//
// Two patterns cover them:
//  - gatherBlocks (allgather, gather): every rank contributes one block; the readers (every rank,
//    or the root) copy block q out of rank q's slot into place q of their output.
//  - scatterBlocks (all_to_all, scatter): the writers (every rank, or the root) contribute one
//    block per rank; rank r copies block r out of each writer's slot.
// broadcast has one writer that every rank reads. Small calls carry the blocks in the arrival round
// (one synchronization). Larger ones, where ranks may read each other's memory
// (ShmGroup::directReads), copy each block once, straight from its owner's buffer (moveDirect: two
// synchronizations); otherwise they go through the chunk slots, a slot holding one block's next
// piece (gather) or every block's next piece (scatter). A rank's own block never goes through
// shared memory: it is copied from input to output directly.
#include <algorithm>

#include "backend/shm/shm_backend.h"
#include "core/copy_bytes.h"

namespace chorus::backend::shm {
namespace {

// Above this a broadcast pipelines through the chunk slots even where direct reads work: the root
// then copies while its readers copy, using two cores where a direct read uses one
// (bench/cma_bench.cc: direct reads win 2-5x from 16 KiB to 1 MiB, pipelining 1.5-2x above).
constexpr size_t kDirectBroadcastMaxBytes = 1 << 20;

// Copies `bytes` unless source and destination are the same place (an in-place allgather).
void copyUnlessSame(std::byte* to, const std::byte* from, size_t bytes) {
  if (to != from)
    copyBytes(to, from, bytes);
}

}  // namespace

void ShmBackend::gatherBlocks(
    const CallContext& call, const void* input, void* output, size_t bytes, int reader) {
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  const int me = rank();
  const bool reads = reader == kEveryRank || reader == me;
  const bool fills = reader != me;  // a lone reader's block goes straight to its output
  if (bytes <= ShmGroup::kSmallSlotBytes) {
    const uint64_t sequence = arrive(call, in, fills ? bytes : 0);
    for (int q = 0; reads && q < size(); ++q) {
      const std::byte* from = q == me ? in : group_->arrivalData(q, sequence, bytes);
      copyUnlessSame(out + q * bytes, from, bytes);
    }
    return;
  }
  if (group_->directReads()) {
    moveDirect(call, in, [&](const std::vector<uintptr_t>& inputs) {
      if (!reads)
        return;
      copyUnlessSame(out + me * bytes, in, bytes);
      for (int k = 1; k < size(); ++k) {
        const int q = (me + k) % size();  // readers start at different peers
        group_->readFrom(q, out + q * bytes, inputs[q], bytes);
      }
    });
    return;
  }
  arrive(call);
  if (reads)
    copyUnlessSame(out + me * bytes, in, bytes);
  const size_t m = ShmGroup::kChunkSlotBytes;
  auto piece = [&](size_t i) { return std::min(m, bytes - i * m); };
  exchangeChunks(
      call, ceilDiv(bytes, m),
      [&](size_t i, std::byte* slot) {
        if (fills)
          copyBytes(slot, in + i * m, piece(i));
      },
      [&](size_t i, uint64_t parity) {
        for (int q = 0; reads && q < size(); ++q) {
          if (q != me)
            copyBytes(out + q * bytes + i * m, group_->chunkSlot(q, parity), piece(i));
        }
      });
}

void ShmBackend::scatterBlocks(
    const CallContext& call, const void* input, void* output, size_t bytes, int writer) {
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  const int me = rank();
  const int p = size();
  const bool writes = writer == kEveryRank || writer == me;
  // Where block `me` of writer q lands: place q of the output, or all of it for one writer.
  auto destination = [&](int q) { return writer == kEveryRank ? out + q * bytes : out; };
  auto isWriter = [&](int q) { return writer == kEveryRank || writer == q; };
  if (bytes * p <= ShmGroup::kSmallSlotBytes) {
    const uint64_t sequence = arrive(call, in, writes ? bytes * p : 0);
    for (int q = 0; q < p; ++q) {
      if (isWriter(q)) {
        const std::byte* from = q == me ? in : group_->arrivalData(q, sequence, bytes * p);
        copyBytes(destination(q), from + me * bytes, bytes);
      }
    }
    return;
  }
  if (group_->directReads()) {
    moveDirect(call, in, [&](const std::vector<uintptr_t>& inputs) {
      for (int k = 0; k < p; ++k) {
        const int q = (me + k) % p;
        if (q == me && writes)
          copyBytes(destination(me), in + me * bytes, bytes);
        else if (q != me && isWriter(q))
          group_->readFrom(q, destination(q), inputs[q] + me * bytes, bytes);
      }
    });
    return;
  }
  arrive(call);
  if (writes)
    copyBytes(destination(me), in + me * bytes, bytes);
  const size_t m = pieceBytes(p);
  auto piece = [&](size_t i) { return std::min(m, bytes - i * m); };
  exchangeChunks(
      call, ceilDiv(bytes, m),
      [&](size_t i, std::byte* slot) {
        for (int q = 0; writes && q < p; ++q) {
          if (q != me)
            copyBytes(slot + q * m, in + q * bytes + i * m, piece(i));
        }
      },
      [&](size_t i, uint64_t parity) {
        for (int q = 0; q < p; ++q) {
          if (q != me && isWriter(q))
            copyBytes(destination(q) + i * m, group_->chunkSlot(q, parity) + me * m, piece(i));
        }
      });
}

void ShmBackend::allgather(const CallContext& call, const AllgatherArgs& args) {
  guarded([&] { gatherBlocks(call, args.input, args.output, args.bytesPerRank, kEveryRank); });
}

void ShmBackend::gather(const CallContext& call, const GatherArgs& args) {
  guarded([&] { gatherBlocks(call, args.input, args.output, args.bytesPerRank, args.root); });
}

void ShmBackend::allToAll(const CallContext& call, const AllToAllArgs& args) {
  guarded([&] { scatterBlocks(call, args.input, args.output, args.bytesPerRank, kEveryRank); });
}

void ShmBackend::scatter(const CallContext& call, const ScatterArgs& args) {
  guarded([&] { scatterBlocks(call, args.input, args.output, args.bytesPerRank, args.root); });
}

// The root's bytes go to every rank: one writer, every rank reads it. A root with separate input
// and output copies its own while the others read (its input is only read meanwhile); one whose
// output overlaps its input fills the output first, and the others read that.
void ShmBackend::broadcast(const CallContext& call, const BroadcastArgs& args) {
  guarded([&] {
    const bool isRoot = rank() == args.root;
    const auto* in = static_cast<const std::byte*>(args.input);
    auto* out = static_cast<std::byte*>(args.output);
    const auto from = reinterpret_cast<uintptr_t>(in), to = reinterpret_cast<uintptr_t>(out);
    const bool copyAlong = isRoot && (from + args.bytes <= to || to + args.bytes <= from);
    if (isRoot && !copyAlong)
      copyToOutput(in, out, args.bytes);
    const std::byte* source = copyAlong ? in : out;  // what the root offers
    auto copyOwn = [&](size_t offset, size_t bytes) {
      if (copyAlong)
        copyBytes(out + offset, in + offset, bytes);
    };
    if (args.bytes <= ShmGroup::kSmallSlotBytes) {
      const uint64_t sequence = arrive(call, source, isRoot ? args.bytes : 0);
      if (!isRoot)
        copyBytes(out, group_->arrivalData(args.root, sequence, args.bytes), args.bytes);
      copyOwn(0, args.bytes);
      return;
    }
    if (group_->directReads() && args.bytes <= kDirectBroadcastMaxBytes) {
      moveDirect(call, source, [&](const std::vector<uintptr_t>& inputs) {
        if (!isRoot)
          group_->readFrom(args.root, out, inputs[args.root], args.bytes);
        copyOwn(0, args.bytes);
      });
      return;
    }
    arrive(call);
    const size_t m = ShmGroup::kChunkSlotBytes;
    auto piece = [&](size_t i) { return std::min(m, args.bytes - i * m); };
    exchangeChunks(
        call, ceilDiv(args.bytes, m),
        [&](size_t i, std::byte* slot) {
          if (isRoot)
            copyBytes(slot, source + i * m, piece(i));
        },
        [&](size_t i, uint64_t parity) {
          if (!isRoot)
            copyBytes(out + i * m, group_->chunkSlot(args.root, parity), piece(i));
          copyOwn(i * m, piece(i));
        });
  });
}

}  // namespace chorus::backend::shm
