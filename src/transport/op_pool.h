// Op storage: PostedOp, what every transport records of a posted send or receive; OpPool, the ops
// a transport has in flight, with storage reused across calls so the hot path allocates nothing
// once warm; and checkPost, the argument checks every postSend / postRecv makes (Transport
// contract in transport.h).
//
// A transport's op type derives from PostedOp and adds how it moves the bytes (bytes moved so
// far, MPI requests). Ops have stable addresses from acquire() until release(). Few are in flight
// at a time, so lookups are linear. Not thread-safe: the transport's lock guards it.
#pragma once

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "transport/transport.h"

namespace chorus::transport {

// One posted send or receive, as the caller gave it.
struct PostedOp {
  Request* request = nullptr;
  bool isSend = false;
  bool complete = false;  // its bytes have all moved (a send may complete before the peer has them)
  int peer = -1;
  uint64_t tag = 0;
  Fingerprint fingerprint;
  char* data = nullptr;
  size_t bytes = 0;
  uint64_t order = 0;  // when it was posted: later posts have larger values (matching.h)
};

// The checks of a post by rank `rank` of `size` to `peer` (InvalidArgumentError naming what is
// wrong): another rank (or kAnyPeer, for a receive in a group with another rank), a buffer unless
// empty, and a request not already pending.
inline void checkPost(
    int rank, int size, bool isSend, int peer, const void* data, size_t bytes, bool pending) {
  const bool anyPeer = !isSend && peer == kAnyPeer;
  CHORUS_CHECK_ARG(!anyPeer || size > 1, "rank ", rank,
                   " (this process): a receive from any peer in a group of one rank, which no "
                   "one could send to");
  CHORUS_CHECK_ARG(anyPeer || (peer >= 0 && peer < size && peer != rank), "rank ", rank,
                   " (this process): peer ", peer, " is not another rank of this group of ", size,
                   " ranks");
  CHORUS_CHECK_ARG(data != nullptr || bytes == 0, "rank ", rank,
                   " (this process): a null buffer of ", bytes, " bytes was posted");
  CHORUS_CHECK_ARG(!pending, "rank ", rank,
                   " (this process): this request is already pending; wait for it first");
}

template <typename Op>
class OpPool {
  static_assert(std::is_base_of_v<PostedOp, Op>);

 public:
  // Checks a post of `request` to `peer` by rank `rank` of `size` (checkPost), then returns a
  // recycled op, now active, whose PostedOp part describes the post (not complete); the fields the
  // transport adds keep their last values, for it to reset. Sets request.peer, clears request.done.
  Op& acquire(int rank,
              int size,
              bool isSend,
              int peer,
              uint64_t tag,
              const Fingerprint& fingerprint,
              void* data,
              size_t bytes,
              Request& request) {
    checkPost(rank, size, isSend, peer, data, bytes, find(&request) != nullptr);
    if (free_.empty()) {
      storage_.push_back(std::make_unique<Op>());
      free_.push_back(storage_.back().get());
    }
    Op* op = free_.back();
    free_.pop_back();
    active_.push_back(op);
    static_cast<PostedOp&>(*op) = PostedOp{
        &request, isSend, false, peer, tag, fingerprint, static_cast<char*>(data), bytes, ++posts_};
    request.peer = peer;
    request.done = false;
    return *op;
  }

  // The active op of `request`, or null.
  Op* find(const Request* request) const {
    for (Op* op : active_) {
      if (op->request == request)
        return op;
    }
    return nullptr;
  }

  // An active op is done with: back to the free list.
  void release(Op* op) {
    auto it = std::find(active_.begin(), active_.end(), op);
    CHORUS_ASSERT(it != active_.end());
    *it = active_.back();
    active_.pop_back();
    free_.push_back(op);
  }

  // Forgets every active op (the transport failed). Those for which stillUsed(op) is true are
  // leaked instead of reused: something outside (the MPI library) may still write their buffers.
  template <typename StillUsed>
  void releaseAll(StillUsed&& stillUsed) {
    for (Op* op : active_) {
      if (!stillUsed(*op)) {
        free_.push_back(op);
        continue;
      }
      auto it = std::find_if(storage_.begin(), storage_.end(),
                             [op](const std::unique_ptr<Op>& owned) { return owned.get() == op; });
      if (it != storage_.end()) {
        (void)it->release();  // deliberately leaked
        storage_.erase(it);
      }
    }
    active_.clear();
  }
  void releaseAll() {
    releaseAll([](const Op&) { return false; });
  }

  // Makes `count` free ops up front, each passed to `prepare(op)` (to size its buffers), and room
  // for that many in flight: a transport whose calls keep at most `count` ops in flight then
  // allocates nothing for them, even the first time it has that many.
  template <typename Prepare>
  void prepare(size_t count, Prepare&& prepare) {
    storage_.reserve(storage_.size() + count);
    free_.reserve(free_.size() + count);
    active_.reserve(active_.size() + count);
    for (size_t i = 0; i < count; ++i) {
      storage_.push_back(std::make_unique<Op>());
      prepare(*storage_.back());
      free_.push_back(storage_.back().get());
    }
  }

  // The ops in flight, in no particular order.
  const std::vector<Op*>& active() const { return active_; }

  // Tells the listener of every complete active op that has one (Request::listener), once.
  void notifyCompleted() noexcept {
    for (Op* op : active_) {
      CompletionListener* listener = op->request->listener;
      if (listener != nullptr && op->complete) {
        op->request->listener = nullptr;
        listener->completed(*op->request);
      }
    }
  }

 private:
  std::vector<std::unique_ptr<Op>> storage_;
  std::vector<Op*> free_;
  std::vector<Op*> active_;
  uint64_t posts_ = 0;
};

}  // namespace chorus::transport
