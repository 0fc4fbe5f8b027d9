// Peers: everything an algorithm may do — post sends and receives to the other ranks of its group,
// wait for them, and borrow scratch memory. It hides the transport, the tag and the collective's
// fingerprint (see Note [Collective fingerprint] in core/collective.h), and applies the call's
// deadline to every wait.
//
// Lifetime: one Peers per collective call. Requests live in a RequestPool, so their
// addresses stay stable until waitAll() and the hot path allocates nothing once the pool is warm.
// If a Peers is destroyed by an exception (an algorithm threw half-way, e.g. a kernel error) or
// with requests still pending, the other ranks can no longer finish the collective, so it aborts
// the transport (unless it has already failed): they fail promptly instead of waiting for the
// deadline, and no buffer of the abandoned call is touched afterwards. The abort carries a generic
// InternalError; a caller that wants peers to see the real error aborts with it first, i.e. runs
// the algorithm in a try block inside the Peers' scope:
//
//   Peers peers(...);
//   try {
//     algorithm.run(peers, args);
//   } catch (...) {
//     transport.abort(std::current_exception());
//     throw;
//   }
//
// Not thread-safe: one algorithm run uses one Peers on one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/deadline.h"
#include "core/workspace.h"
#include "transport/transport.h"

namespace chorus::algorithms {

// Target size of one pipelined segment: big enough to amortize per-message costs, small enough
// that sends and reductions overlap. Algorithms read it through Peers::segmentBytes().
inline constexpr size_t kDefaultSegmentBytes = 256 * 1024;

// Request slots with stable addresses, reused across calls so the hot path does not allocate. One
// per communicator, beside its Workspace; used by one Peers at a time.
class RequestPool {
 public:
  RequestPool() = default;
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

 private:
  friend class Peers;
  static constexpr size_t kRequestsPerBlock = 64;

  // A fresh slot; slots are handed out in order and all recycled by releaseAll().
  transport::Request* acquire();
  transport::Request& at(size_t i) {
    return requestBlocks_[i / kRequestsPerBlock][i % kRequestsPerBlock];
  }
  size_t used() const { return used_; }
  void releaseAll() { used_ = 0; }

  std::vector<std::unique_ptr<transport::Request[]>> requestBlocks_;
  size_t used_ = 0;
  std::vector<transport::Request*> pending_;  // scratch list for Peers::waitAll()
};

class Peers {
 public:
  Peers(transport::Transport& transport,
        const Fingerprint& fingerprint,
        Deadline deadline,
        Workspace& workspace,
        RequestPool& requests,
        uint64_t tag = transport::kCollectiveTag);
  ~Peers();
  Peers(const Peers&) = delete;
  Peers& operator=(const Peers&) = delete;

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  const Fingerprint& fingerprint() const { return fingerprint_; }
  // The world rank of member `member`, for errors (Note [One rank numbering]).
  int worldRank(int member) const { return transport_.worldRank(member); }

  // Post a send / receive and return its request, which stays valid until waitAll(). Buffers must
  // stay valid until the request completes (wait()/waitAll()). `peer` must not be rank().
  transport::Request* send(int peer, const void* data, size_t bytes);
  transport::Request* recv(int peer, void* data, size_t bytes);
  // Waits for one request posted through this Peers.
  void wait(transport::Request* request);
  // Waits for everything posted since the last waitAll(), then recycles the requests.
  void waitAll();
  // send + recv + waitAll: the usual step of a ring or a butterfly.
  void sendRecv(int sendPeer,
                const void* sendData,
                size_t sendBytes,
                int recvPeer,
                void* recvData,
                size_t recvBytes);
  // Scratch of at least `bytes`, valid for the rest of this collective. One region per call: an
  // algorithm that needs several areas carves them from one call (patterns::alignUp).
  void* scratch(size_t bytes) { return workspace_.get(bytes); }

  // Target size of a pipelined segment (kDefaultSegmentBytes unless changed, e.g. by tests that
  // want many segments from small vectors).
  size_t segmentBytes() const { return segmentBytes_; }
  void setSegmentBytes(size_t bytes) { segmentBytes_ = bytes == 0 ? 1 : bytes; }

  // Note [Heard from every rank]
  // An algorithm calls heardFromAll() once this rank has heard, directly or through the ranks in
  // between, from every rank of the call, as the message that brings the news arrives: in a ring
  // phase (reduce-scatter, allgather), the last step's first segment; after the butterfly's last
  // round, the pairwise exchange's last step or the dissemination's last round; at the root of a
  // reduce or gather once the contributions of all are in (the chain's root at its first
  // segment). It is never called in a broadcast or scatter, whose ranks hear only from the root's
  // side. The backend hooks it to the timeline (Note [Timeline]): the tcp transport has no arrival
  // round, so this is when a rank can know that its last peer arrived. It is an upper bound: the
  // message that brought the news took its transfer time (a whole exchange's, where the step is
  // not pipelined). (Groups of one never reach an algorithm: the rows that return early there do
  // not call it.)
  using HeardFromAllHook = void (*)(const void* context) noexcept;
  void onHeardFromAll(HeardFromAllHook hook, const void* context) {
    heardFromAllHook_ = hook;
    heardFromAllContext_ = context;
  }
  void heardFromAll() const noexcept {
    if (heardFromAllHook_ != nullptr)
      heardFromAllHook_(heardFromAllContext_);
  }

 private:
  transport::Transport& transport_;
  Fingerprint fingerprint_;
  Deadline deadline_;
  Workspace& workspace_;
  RequestPool& requests_;
  uint64_t tag_;
  int uncaughtAtStart_;  // std::uncaught_exceptions() at construction
  size_t segmentBytes_ = kDefaultSegmentBytes;
  HeardFromAllHook heardFromAllHook_ = nullptr;
  const void* heardFromAllContext_ = nullptr;
};

}  // namespace chorus::algorithms
