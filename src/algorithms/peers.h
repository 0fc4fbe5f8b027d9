// Peers: everything an algorithm may do — post sends and receives to the other ranks of its group,
// wait for them, and borrow scratch memory. It hides the transport, the tag and the collective's
// fingerprint (see Note [Collective fingerprint]), and applies the call's deadline to every wait.
//
// Not thread-safe: one algorithm run uses one Peers on one thread.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "core/deadline.h"
#include "transport/transport.h"

namespace chorus::algorithms {

// Scratch memory reused across calls so the hot path does not allocate or fault in fresh pages.
class Workspace {
 public:
  // A buffer of at least `bytes`, valid until the next call to get(). Contents are unspecified.
  void* get(size_t bytes);

 private:
  std::vector<std::byte> buffer_;
};

class Peers {
 public:
  Peers(transport::Transport& transport,
        const transport::Fingerprint& fingerprint,
        Deadline deadline,
        Workspace& workspace,
        uint64_t tag = transport::kCollectiveTag);

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }

  // Post a send / receive; buffers must stay valid until waitAll().
  void send(int peer, const void* data, size_t bytes);
  void recv(int peer, void* data, size_t bytes);
  // Waits for everything posted since the last waitAll().
  void waitAll();
  // send + recv + waitAll: the usual step of a ring or a butterfly.
  void sendRecv(int sendPeer, const void* sendData, size_t sendBytes, int recvPeer, void* recvData,
                size_t recvBytes);
  // Scratch of at least `bytes`, valid for the rest of this collective. One region per call.
  void* scratch(size_t bytes) { return workspace_.get(bytes); }

 private:
  transport::Transport& transport_;
  transport::Fingerprint fingerprint_;
  Deadline deadline_;
  Workspace& workspace_;
  uint64_t tag_;
  std::deque<transport::Request> requests_;
  std::vector<transport::Request*> pending_;
};

}  // namespace chorus::algorithms
