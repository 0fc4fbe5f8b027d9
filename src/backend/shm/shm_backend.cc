// The shm backend (see shm_backend.h): the arrival round, dispatch, and failure handling. The
// native allreduce is in shm_allreduce.cc.
#include "backend/shm/shm_backend.h"

#include <cstring>

#include "core/check.h"

namespace chorus::backend::shm {

ShmBackend::ShmBackend(std::unique_ptr<ShmGroup> group, std::unique_ptr<Backend> fallback)
    : group_(std::move(group)), fallback_(std::move(fallback)), sources_(group_->size()) {
  CHORUS_ASSERT(fallback_ != nullptr && fallback_->size() == group_->size());
}

ShmBackend::~ShmBackend() { close(); }

template <typename Body>
void ShmBackend::guarded(Body&& body) {
  group_->throwIfFailed();
  try {
    body();
  } catch (...) {
    abort(std::current_exception());
    throw;
  }
}

template <typename Args>
void ShmBackend::viaFallback(const CallContext& call,
                             void (Backend::*collective)(const CallContext&, const Args&),
                             const Args& args) {
  guarded([&] {
    arrive(call, nullptr, 0);
    (fallback_.get()->*collective)(call, args);
  });
}

uint64_t ShmBackend::arrive(const CallContext& call, const void* data, size_t bytes) {
  const uint64_t sequence = ++sequence_;
  group_->setFingerprint(sequence, call.fingerprint);
  if (bytes > 0)
    std::memcpy(group_->smallSlot(rank(), sequence), data, bytes);
  group_->publish(Step::kArrived, sequence);
  group_->waitAll(Step::kArrived, sequence, call.deadline);
  for (int peer = 0; peer < size(); ++peer) {
    const transport::Fingerprint theirs = group_->fingerprint(peer, sequence);
    if (peer != rank() && !call.fingerprint.firstDifference(theirs).empty())
      throw transport::makeMismatchError(rank(), peer, call.fingerprint, theirs);
  }
  return sequence;
}

void ShmBackend::allreduce(const CallContext& call, const algorithms::AllreduceArgs& args) {
  guarded([&] {
    if (args.count * dataTypeSize(args.dtype) <= ShmGroup::kSmallSlotBytes)
      allreduceSmall(call, args);
    else
      allreduceChunked(call, args);
  });
}

void ShmBackend::barrier(const CallContext& call) {
  guarded([&] { arrive(call, nullptr, 0); });
}

void ShmBackend::reduceScatter(const CallContext& call, const algorithms::ReduceScatterArgs& args) {
  viaFallback(call, &Backend::reduceScatter, args);
}

void ShmBackend::allgather(const CallContext& call, const algorithms::AllgatherArgs& args) {
  viaFallback(call, &Backend::allgather, args);
}

void ShmBackend::broadcast(const CallContext& call, const algorithms::BroadcastArgs& args) {
  viaFallback(call, &Backend::broadcast, args);
}

void ShmBackend::reduce(const CallContext& call, const algorithms::ReduceArgs& args) {
  viaFallback(call, &Backend::reduce, args);
}

void ShmBackend::gather(const CallContext& call, const algorithms::GatherArgs& args) {
  viaFallback(call, &Backend::gather, args);
}

void ShmBackend::scatter(const CallContext& call, const algorithms::ScatterArgs& args) {
  viaFallback(call, &Backend::scatter, args);
}

void ShmBackend::allToAll(const CallContext& call, const algorithms::AllToAllArgs& args) {
  viaFallback(call, &Backend::allToAll, args);
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
