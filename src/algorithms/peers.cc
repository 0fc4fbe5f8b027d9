// Peers and Workspace: see peers.h.
#include "algorithms/peers.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <new>
#include <span>

#include "core/check.h"

namespace chorus::algorithms {

namespace {
constexpr size_t kAlignment = 64;
}  // namespace

void Workspace::FreeDeleter::operator()(void* p) const noexcept { std::free(p); }

Workspace::Workspace() = default;
Workspace::~Workspace() = default;

void* Workspace::get(size_t bytes) {
  if (bytes <= capacity_ && buffer_)
    return buffer_.get();
  // Grow geometrically so a sequence of slightly larger calls does not reallocate every time.
  size_t capacity = std::max(bytes, capacity_ + capacity_ / 2);
  capacity = (std::max<size_t>(capacity, kAlignment) + kAlignment - 1) & ~(kAlignment - 1);
  buffer_.reset();
  capacity_ = 0;
  void* p = std::aligned_alloc(kAlignment, capacity);
  if (p == nullptr)
    throw std::bad_alloc();
  buffer_.reset(static_cast<std::byte*>(p));
  capacity_ = capacity;
  return p;
}

transport::Request* Workspace::acquireRequest() {
  const size_t block = requestsUsed_ / kRequestsPerBlock;
  if (block == requestBlocks_.size()) {
    requestBlocks_.push_back(std::make_unique<transport::Request[]>(kRequestsPerBlock));
  }
  transport::Request* request = &requestBlocks_[block][requestsUsed_ % kRequestsPerBlock];
  *request = transport::Request{};
  ++requestsUsed_;
  return request;
}

Peers::Peers(transport::Transport& transport,
             const transport::Fingerprint& fingerprint,
             Deadline deadline,
             Workspace& workspace,
             uint64_t tag)
    : transport_(transport),
      fingerprint_(fingerprint),
      deadline_(deadline),
      workspace_(workspace),
      tag_(tag),
      uncaughtAtStart_(std::uncaught_exceptions()) {
  workspace_.releaseRequests();
}

Peers::~Peers() {
  bool pending = false;
  for (size_t i = 0; i < workspace_.requestsUsed_; ++i) {
    const auto& block = workspace_.requestBlocks_[i / Workspace::kRequestsPerBlock];
    if (!block[i % Workspace::kRequestsPerBlock].done)
      pending = true;
  }
  workspace_.releaseRequests();
  const bool unwinding = std::uncaught_exceptions() > uncaughtAtStart_;
  if ((!pending && !unwinding) || transport_.failure())
    return;
  // The algorithm stopped half-way (it threw, or left requests behind): the other ranks cannot
  // finish, and the transport may still write into this call's buffers. Fail it; peers hear.
  try {
    // No rank number: the algorithms know member indices only, and peers that hear this quote it
    // behind the sender's world rank (Note [One rank numbering]).
    transport_.abort(std::make_exception_ptr(InternalError(detail::concat(
        "this process left ", fingerprint_.describe(),
        " part-way because of a local error, raised on this process; see its log or exception"))));
  } catch (...) {
    // abort() never throws; building the message might (bad_alloc): nothing more to do.
  }
}

transport::Request* Peers::send(int peer, const void* data, size_t bytes) {
  transport::Request* request = workspace_.acquireRequest();
  transport_.postSend(peer, tag_, fingerprint_, data, bytes, *request);
  return request;
}

transport::Request* Peers::recv(int peer, void* data, size_t bytes) {
  transport::Request* request = workspace_.acquireRequest();
  transport_.postRecv(peer, tag_, fingerprint_, data, bytes, *request);
  return request;
}

void Peers::wait(transport::Request* request) {
  if (request->done)
    return;
  transport::Request* const requests[] = {request};
  transport_.wait(requests, deadline_);
}

void Peers::waitAll() {
  auto& pending = workspace_.pending_;
  pending.clear();
  for (size_t i = 0; i < workspace_.requestsUsed_; ++i) {
    transport::Request& request =
        workspace_
            .requestBlocks_[i / Workspace::kRequestsPerBlock][i % Workspace::kRequestsPerBlock];
    if (!request.done)
      pending.push_back(&request);
  }
  if (!pending.empty())
    transport_.wait(pending, deadline_);
  workspace_.releaseRequests();
}

void Peers::sendRecv(int sendPeer,
                     const void* sendData,
                     size_t sendBytes,
                     int recvPeer,
                     void* recvData,
                     size_t recvBytes) {
  send(sendPeer, sendData, sendBytes);
  recv(recvPeer, recvData, recvBytes);
  waitAll();
}

}  // namespace chorus::algorithms
