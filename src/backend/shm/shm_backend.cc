// The shm backend (see shm_backend.h): the arrival round, the chunked exchange, send/recv, and
// failure handling. The collectives are in shm_reducing.cc and shm_moving.cc.
#include "backend/shm/shm_backend.h"

#include <cstring>

#include "backend/algorithmic_backend.h"
#include "core/check.h"
#include "store/prefix_store.h"
#include "trace/recorder.h"

namespace chorus::backend::shm {

std::unique_ptr<Backend> createShmBackend(const BackendOptions& options) {
  const transport::TransportOptions transportOptions = transportOptionsOf(options, "shm");
  CHORUS_CHECK_ARG(options.oneNode, "rank ", transportOptions.names(options.rank),
                   ": backend 'shm' needs every member of the communicator on one node, but this "
                   "communicator spans several nodes; use backend 'auto', 'hierarchical' or 'tcp'");
  return createShmBackend(transportOptions);
}

std::unique_ptr<Backend> createShmBackend(const transport::TransportOptions& options) {
  auto group =
      std::make_unique<ShmGroup>(options.rank, options.size, options.names,
                                 std::make_shared<store::PrefixStore>("native", options.store),
                                 options.scope, options.deadline);
  transport::TransportOptions transportOptions = options;
  transportOptions.peersReadable = group->directReads();  // probed: the transport need not
  auto fallback =
      std::make_unique<AlgorithmicBackend>(transport::createTransport("shm", transportOptions));
  return std::make_unique<ShmBackend>(std::move(group), std::move(fallback));
}

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
  // For every wait of this collective: the front end's transfers (which may be the fallback's).
  group_->pollWhileWaiting(call.whileWaiting);
  group_->arrive(sequence, call.fingerprint, data, bytes);
  const bool waited = group_->waitArrivals(sequence, bytes, call.deadline);
  trace::noteAllArrived(call.record, waited);  // Note [Timeline]: when it saw the last peer
  for (int peer = 0; peer < size(); ++peer) {
    const Fingerprint& theirs = group_->arrivalFingerprint(peer, sequence);
    if (!(theirs == call.fingerprint))  // this rank's own record is equal
      throw makeMismatchError(group_->names()(rank()), group_->names()(peer), call.fingerprint,
                              theirs);
  }
  return sequence;
}

// Step s (counted over the communicator's life) uses the slots of parity s & 1, which the readers
// of step s - 2 must have left: kDone says a rank has finished reading a step.
void ShmBackend::exchangeChunks(
    const CallContext& call, size_t steps, FillStep fill, SlotStep drain, SlotStep reduce) {
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

void ShmBackend::moveDirect(const CallContext& call, const void* input, ReadPeers read) {
  const auto address = reinterpret_cast<uintptr_t>(input);
  const uint64_t sequence = arrive(call, &address, sizeof address);
  for (int q = 0; q < size(); ++q)
    std::memcpy(&addresses_[q], group_->arrivalData(q, sequence, sizeof address), sizeof address);
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
  guardedTransfer([&] { fallback_->send(call, data, bytes, peer, tag); });
}

void ShmBackend::recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) {
  guardedTransfer([&] { fallback_->recv(call, data, bytes, peer, tag); });
}

void ShmBackend::postSend(const CallContext& call,
                          const void* data,
                          size_t bytes,
                          int peer,
                          int tag,
                          Transfer& transfer) {
  guardedTransfer([&] { fallback_->postSend(call, data, bytes, peer, tag, transfer); });
}

void ShmBackend::postRecv(
    const CallContext& call, void* data, size_t bytes, int peer, int tag, Transfer& transfer) {
  guardedTransfer([&] { fallback_->postRecv(call, data, bytes, peer, tag, transfer); });
}

bool ShmBackend::waitSome(std::span<Transfer* const> transfers, Deadline deadline) {
  bool completed = false;
  guardedTransfer([&] { completed = fallback_->waitSome(transfers, deadline); });
  return completed;
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
