// The shm backend's all_to_all_v (see shm_backend.h): all_to_all with a block size per pair.
//
// The arrival round carries each rank's table: the address and extent of its input, and its
// send sizes, send offsets and receive sizes. Where the table and the input together fit the small
// slot, the input follows the table. Every rank checks every pair in the tables (sender s's size
// for r against r's size from s), so a disagreement is the same MismatchError on every rank,
// before any block moves. Then each rank copies the blocks it receives: out of the sender's small
// slot where the input travelled with the table, else straight out of the sender's memory
// (ShmGroup::directReads), after which a second round keeps every input in place until its
// readers are done. Without direct reads, a call in which some input did not travel runs whole on
// the fallback (the pairwise exchange over the shm transport). Every choice depends on the tables
// alone, which every rank sees, so every rank makes the same one.
#include <algorithm>
#include <cstring>

#include "backend/shm/shm_backend.h"
#include "core/copy_bytes.h"

namespace chorus::backend::shm {
namespace {

// A rank's table in its small slot, as 64-bit words: address, extent, then size() send sizes,
// size() send offsets and size() receive sizes. The input (extent bytes) follows when it fits.
class SplitTable {
 public:
  static size_t bytes(int size) { return sizeof(uint64_t) * (2 + 3 * static_cast<size_t>(size)); }

  SplitTable(const std::byte* words, int size) : words_(words), size_(size) {}
  uint64_t address() const { return word(0); }
  uint64_t extent() const { return word(1); }
  uint64_t sendBytes(int peer) const { return word(2 + peer); }
  uint64_t sendOffset(int peer) const { return word(2 + size_ + peer); }
  uint64_t recvBytes(int peer) const { return word(2 + 2 * size_ + peer); }
  // Whether the input follows the table in the small slot.
  bool carriesInput() const { return bytes(size_) + extent() <= ShmGroup::kSmallSlotBytes; }
  const std::byte* input() const { return words_ + bytes(size_); }

  static void write(std::byte* to, const AllToAllVArgs& args, int size) {
    uint64_t extent = 0;
    for (int peer = 0; peer < size; ++peer)
      extent = std::max<uint64_t>(extent, args.sendOffsets[peer] + args.sendBytes[peer]);
    auto put = [&](size_t index, uint64_t value) {
      std::memcpy(to + index * sizeof value, &value, sizeof value);
    };
    put(0, reinterpret_cast<uintptr_t>(args.input));
    put(1, extent);
    for (int peer = 0; peer < size; ++peer) {
      put(2 + peer, args.sendBytes[peer]);
      put(2 + size + peer, args.sendOffsets[peer]);
      put(2 + 2 * size + peer, args.recvBytes[peer]);
    }
  }

 private:
  uint64_t word(size_t index) const {
    uint64_t value;
    std::memcpy(&value, words_ + index * sizeof value, sizeof value);
    return value;
  }

  const std::byte* words_;
  int size_;
};

// Published arrivals of this size or more go to the small slot, where the tables are read from.
constexpr size_t kInSmallSlot = ShmGroup::kInlineBytes + 1;

}  // namespace

uint64_t ShmBackend::arriveWithSplits(const CallContext& call, const AllToAllVArgs& args) {
  const int p = size();
  std::byte* slot = group_->outgoingSlot(sequence_ + 1);  // arrive() numbers it sequence_ + 1
  SplitTable::write(slot, args, p);
  const SplitTable mine(slot, p);
  size_t published = SplitTable::bytes(p);
  if (mine.carriesInput()) {
    copyBytes(slot + published, args.input, mine.extent());
    published += mine.extent();
  }
  return arrive(call, slot, std::max(published, kInSmallSlot));
}

void ShmBackend::allToAllV(const CallContext& call, const AllToAllVArgs& args) {
  guarded([&] {
    const int p = size();
    const int me = rank();
    if (SplitTable::bytes(p) > ShmGroup::kSmallSlotBytes)
      return fallback_->allToAllV(call, args);  // p alone decides: the same on every rank
    const uint64_t sequence = arriveWithSplits(call, args);
    auto table = [&](int q) {
      return SplitTable(group_->arrivalData(q, sequence, kInSmallSlot), p);
    };
    bool allCarried = true;
    for (int sender = 0; sender < p; ++sender) {
      const SplitTable from = table(sender);
      allCarried = allCarried && from.carriesInput();
      for (int receiver = 0; receiver < p; ++receiver) {
        const uint64_t expected = table(receiver).recvBytes(sender);
        if (from.sendBytes(receiver) != expected) {
          throw makeSplitMismatchError(group_->names()(sender), group_->names()(receiver),
                                       call.fingerprint, from.sendBytes(receiver), expected);
        }
      }
    }
    if (!allCarried && !group_->directReads())
      return fallback_->allToAllV(call, args);
    const auto* in = static_cast<const std::byte*>(args.input);
    auto* out = static_cast<std::byte*>(args.output);
    for (int k = 0; k < p; ++k) {
      const int q = (me + k) % p;  // readers start at different peers
      const SplitTable from = table(q);
      std::byte* to = out + args.recvOffsets[q];
      const size_t bytes = args.recvBytes[q];
      if (q == me)
        copyBytes(to, in + args.sendOffsets[me], bytes);
      else if (from.carriesInput())
        copyBytes(to, from.input() + from.sendOffset(me), bytes);
      else if (bytes > 0)
        group_->readFrom(q, to, from.address() + from.sendOffset(me), bytes);
    }
    if (!allCarried)
      arrive(call);  // every input stays in place until its readers are done
  });
}

}  // namespace chorus::backend::shm
