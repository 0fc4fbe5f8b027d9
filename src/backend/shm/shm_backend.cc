// The shm backend (see shm_backend.h): the arrival round, the chunked exchange, send/recv, and
// failure handling. The collectives are in shm_reducing.cc and shm_moving.cc.
#include "backend/shm/shm_backend.h"

#include <cstring>

#include "core/check.h"

namespace chorus::backend::shm {

ShmBackend::ShmBackend(std::unique_ptr<ShmGroup> group, std::unique_ptr<Backend> fallback)
    : group_(std::move(group)),
      fallback_(std::move(fallback)),
      sources_(group_->size()),
      addresses_(group_->size()) {
  CHORUS_ASSERT(fallback_ != nullptr && fallback_->size() == group_->size());
  // Chunked collectives cut a slot into one piece per rank, of at least a cache line.
  CHORUS_CHECK_ARG(pieceBytes(size()) > 0, "the shm backend serves at most ",
                   ShmGroup::kChunkSlotBytes / kCacheLineBytes, " ranks, not ", size(),
                   "; use backend 'tcp'");
}

ShmBackend::~ShmBackend() { close(); }

uint64_t ShmBackend::arrive(const CallContext& call, const void* data, size_t bytes) {
  const uint64_t sequence = ++sequence_;
#ifndef CHORUS_MEASURE_WITHOUT_MISMATCH_CHECK
  group_->setFingerprint(sequence, call.fingerprint);
#endif
  if (bytes > 0)
    std::memcpy(group_->smallSlot(rank(), sequence), data, bytes);
  group_->publish(Step::kArrived, sequence);
  group_->waitAll(Step::kArrived, sequence, call.deadline);
#ifndef CHORUS_MEASURE_WITHOUT_MISMATCH_CHECK  // see src/backend/CMakeLists.txt
  for (int peer = 0; peer < size(); ++peer) {
    const transport::Fingerprint theirs = group_->fingerprint(peer, sequence);
    if (peer != rank() && !call.fingerprint.firstDifference(theirs).empty())
      throw transport::makeMismatchError(group_->names()(rank()), group_->names()(peer),
                                         call.fingerprint, theirs);
  }
#endif
  return sequence;
}

// Step s (counted over the communicator's life) uses the slots of parity s & 1, which the readers
// of step s - 2 must have left: kDone says a rank has finished reading a step.
void ShmBackend::exchangeChunks(const CallContext& call,
                                size_t steps,
                                const FillStep& fill,
                                const SlotStep& drain,
                                const SlotStep& reduce) {
  for (size_t i = 0; i < steps; ++i) {
    const uint64_t step = chunkSteps_;
    if (step >= 2)
      group_->waitAll(Step::kDone, step - 1, call.deadline);
    fill(i, group_->chunkSlot(rank(), step));
    group_->publish(Step::kCopied, step + 1);
    group_->waitAll(Step::kCopied, step + 1, call.deadline);
    if (reduce) {
      reduce(i, step);
      group_->publish(Step::kReduced, step + 1);
      group_->waitAll(Step::kReduced, step + 1, call.deadline);
    }
    drain(i, step);
    group_->publish(Step::kDone, step + 1);
    chunkSteps_ = step + 1;
  }
}

void ShmBackend::moveDirect(const CallContext& call, const void* input, const ReadPeers& read) {
  const auto address = reinterpret_cast<uintptr_t>(input);
  const uint64_t sequence = arrive(call, &address, sizeof address);
  for (int q = 0; q < size(); ++q)
    std::memcpy(&addresses_[q], group_->smallSlot(q, sequence), sizeof(uintptr_t));
  read(addresses_);
  arrive(call);
}

size_t ShmBackend::pieceBytes(int pieces) const {
  return ShmGroup::kChunkSlotBytes / static_cast<size_t>(pieces) / kCacheLineBytes *
         kCacheLineBytes;
}

void ShmBackend::barrier(const CallContext& call) {
  guarded([&] { arrive(call); });
}

void ShmBackend::send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) {
  guarded([&] { fallback_->send(call, data, bytes, peer, tag); });
}

void ShmBackend::recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) {
  guarded([&] { fallback_->recv(call, data, bytes, peer, tag); });
}

void ShmBackend::abort(std::exception_ptr reason) noexcept {
  group_->fail(reason);
  fallback_->abort(reason);
}

void ShmBackend::close() noexcept {
  group_->close();
  fallback_->close();
}

}  // namespace chorus::backend::shm
