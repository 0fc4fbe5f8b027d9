// Peers and RequestPool: see peers.h.
#include "algorithms/peers.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <new>
#include <span>

#include "core/check.h"

namespace chorus::algorithms {

transport::Request* RequestPool::acquire() {
  if (used_ / kRequestsPerBlock == requestBlocks_.size())
    requestBlocks_.push_back(std::make_unique<transport::Request[]>(kRequestsPerBlock));
  transport::Request* request = &at(used_++);
  *request = transport::Request{};
  return request;
}

Peers::Peers(transport::Transport& transport,
             const Fingerprint& fingerprint,
             Deadline deadline,
             Workspace& workspace,
             RequestPool& requests,
             uint64_t tag)
    : transport_(transport),
      fingerprint_(fingerprint),
      deadline_(deadline),
      workspace_(workspace),
      requests_(requests),
      tag_(tag),
      uncaughtAtStart_(std::uncaught_exceptions()) {
  requests_.releaseAll();
}

Peers::~Peers() {
  bool pending = false;
  for (size_t i = 0; i < requests_.used(); ++i) {
    if (!requests_.at(i).done)
      pending = true;
  }
  requests_.releaseAll();
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
  transport::Request* request = requests_.acquire();
  transport_.postSend(peer, tag_, fingerprint_, data, bytes, *request);
  return request;
}

transport::Request* Peers::recv(int peer, void* data, size_t bytes) {
  transport::Request* request = requests_.acquire();
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
  auto& pending = requests_.pending_;
  pending.clear();
  for (size_t i = 0; i < requests_.used(); ++i) {
    if (!requests_.at(i).done)
      pending.push_back(&requests_.at(i));
  }
  if (!pending.empty())
    transport_.wait(pending, deadline_);
  requests_.releaseAll();
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
