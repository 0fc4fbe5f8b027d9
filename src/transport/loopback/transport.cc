// The loopback transport: `size` endpoints in one process, one per thread, sharing one mutex.
//
// A send copies its bytes straight into the receiver's posted buffer when a receive is waiting for
// it, else into the receiver's queue of unexpected messages. The send then completes at once or,
// by default, only once a receive has matched it (SendCompletion in transport.h): the strictest
// completion the Transport contract allows, so algorithm tests catch waits that only eager sends
// would let finish. Matching, fingerprint and byte checks, deadlines, abort
// propagation and goodbye behave as the contract in transport.h says, so tests of algorithms see
// what they would see over TCP. Waiters sleep on a condition variable; nothing spins.
//
// Its ranks share one lock and fail one another, so it does not derive from the transport core
// (transport/core.h); it uses the same pieces: ops (op_pool.h), matching (matching.h) and the
// standard errors (errors.h).
//
// Cost: one copy per message (two when it arrives before its receive), all under one group lock.
// Limits: for tests only; memory for unexpected messages is unbounded.
#include "transport/loopback/transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/copy_bytes.h"
#include "core/error_codec.h"
#include "transport/matching.h"
#include "transport/op_pool.h"

namespace chorus::transport::loopback {
namespace {

struct Op : PostedOp {};

struct Message {
  uint64_t messageTag = 0;
  Fingerprint fingerprint;
  std::vector<uint8_t> payload;
  const Request* send = nullptr;  // the sender's request, completed when a receive matches
  uint64_t tag() const { return messageTag; }
};

enum class State { kOpen, kClosed, kCrashed };

struct Endpoint {
  explicit Endpoint(int size) : matching(size) {
    for (int sender = 0; sender < size; ++sender)
      matching[sender].shareAnyPeerReceives(sender, &anyPeerReceives);
  }

  std::condition_variable changed;
  State state = State::kOpen;
  std::exception_ptr failure;
  OpPool<Op> ops;                                   // posted and not yet returned by wait()
  AnyPeerReceives<Op> anyPeerReceives;              // receives from any sender, not yet matched
  std::vector<PeerMatching<Op, Message>> matching;  // by sender

  void dropRequests() {
    anyPeerReceives.clear();
    ops.releaseAll();
    for (auto& peer : matching) peer.clear();
  }
};

struct Group {
  SendCompletion completion = SendCompletion::kWhenMatched;
  std::mutex mutex;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank), size_(static_cast<int>(group_->endpoints.size())) {}
  ~LoopbackTransport() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "loopback"; }

  void postSend(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                const void* data,
                size_t bytes,
                Request& request) override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    Op& op =
        addOp(/*isSend=*/true, peer, tag, fingerprint, const_cast<void*>(data), bytes, request);
    Endpoint& to = endpoint(peer);
    if (to.state != State::kOpen)
      return;  // wait() reports the goodbye
    if (to.failure) {
      op.complete = true;
      return;  // it told us (or will); nothing reads the message
    }
    if (Op* recv = to.matching[rank_].takeReceive(tag)) {
      op.complete = true;
      matchLocked(peer, *recv, rank_, fingerprint, data, bytes);
      return;
    }
    const auto* begin = static_cast<const uint8_t*>(data);
    const bool eager = group_->completion == SendCompletion::kWhenBuffered;
    op.complete = eager;
    to.matching[rank_].bufferMessage() =
        Message{tag, fingerprint, {begin, begin + bytes}, eager ? nullptr : &request};
  }

  void postRecv(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                void* data,
                size_t bytes,
                Request& request) override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    Op& op = addOp(/*isSend=*/false, peer, tag, fingerprint, data, bytes, request);
    if (peer == kAnyPeer) {
      peer = senderWithMessage(tag);
      if (peer < 0) {
        endpoint(rank_).anyPeerReceives.add(&op);
        return;
      }
      AnyPeerReceives<Op>::bind(op, peer);
    }
    auto& matching = endpoint(rank_).matching[peer];
    if (Message* found = matching.findMessage(tag)) {
      Message message = std::move(*found);
      matching.removeMessage(found);
      completeSendLocked(peer, message.send);
      matchLocked(rank_, op, peer, message.fingerprint, message.payload.data(),
                  message.payload.size());
      return;
    }
    matching.addReceive(&op);
  }

  void wait(std::span<Request* const> requests, Deadline deadline) override {
    waitFor(requests, deadline, /*some=*/false);
  }

  bool waitSome(std::span<Request* const> requests, Deadline deadline) override {
    return waitFor(requests, deadline, /*some=*/true);
  }

  // Sends deliver in the sender's thread; polling tells the listeners of what has completed.
  void poll() override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    throwIfFailedLocked();
    endpoint(rank_).ops.notifyCompleted();
  }

  void interrupt() noexcept override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    interrupted_ = true;
    endpoint(rank_).changed.notify_all();
  }

  void abort(std::exception_ptr reason) noexcept override {
    if (!reason)
      reason = std::make_exception_ptr(makeAbortedError(rank_));
    std::lock_guard<std::mutex> lock(group_->mutex);
    failLocked(rank_, reason, /*propagate=*/true);
  }

  void close() noexcept override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    Endpoint& self = endpoint(rank_);
    if (self.state != State::kOpen)
      return;
    self.state = State::kClosed;
    leaveLocked();
  }

  std::exception_ptr failure() const override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    return group_->endpoints[rank_]->failure;
  }

  // Leaves without goodbye: every peer fails with PeerError naming this rank.
  void crash() noexcept {
    std::lock_guard<std::mutex> lock(group_->mutex);
    Endpoint& self = endpoint(rank_);
    if (self.state != State::kOpen)
      return;
    self.state = State::kCrashed;
    leaveLocked();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || endpoint(peer).state != State::kOpen)
        continue;
      failLocked(peer, std::make_exception_ptr(makeCrashedPeerError(peer, rank_)),
                 /*propagate=*/false);  // every peer notices by itself, as over TCP
    }
  }

 private:
  Endpoint& endpoint(int rank) const { return *group_->endpoints[rank]; }

  void throwIfFailedLocked() const {
    if (auto failure = endpoint(rank_).failure)
      std::rethrow_exception(failure);
  }

  // The send `request` of rank `sender` was matched by a receive: it completes (if the sender
  // still has it; a failed sender has dropped its requests).
  void completeSendLocked(int sender, const Request* request) {
    if (request == nullptr)
      return;  // completed when it was buffered
    if (Op* send = findOp(sender, request)) {
      send->complete = true;
      endpoint(sender).changed.notify_all();
    }
  }

  // The first sender with a message of `tag` waiting for its receive here, or -1.
  int senderWithMessage(uint64_t tag) {
    for (int sender = 0; sender < size_; ++sender) {
      if (sender != rank_ && endpoint(rank_).matching[sender].findMessage(tag) != nullptr)
        return sender;
    }
    return -1;
  }

  // A receive from any peer that nothing matched yet waits on every open peer; none is a PeerError.
  void waitOnAnyPeerLocked(std::vector<int>& waitingOn) {
    int left = -1;
    bool someoneOpen = false;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_)
        continue;
      if (endpoint(peer).state == State::kOpen) {
        someoneOpen = true;
        waitingOn.push_back(peer);
      } else {
        left = peer;
      }
    }
    if (someoneOpen)
      return;
    failLocked(rank_, std::make_exception_ptr(makeAllPeersClosedError(rank_, left)), true);
    throwIfFailedLocked();
  }

  Op* findOp(const Request* request) const { return findOp(rank_, request); }
  Op* findOp(int rank, const Request* request) const { return endpoint(rank).ops.find(request); }

  Op& addOp(bool isSend,
            int peer,
            uint64_t tag,
            const Fingerprint& fingerprint,
            void* data,
            size_t bytes,
            Request& request) {
    throwIfFailedLocked();
    return endpoint(rank_).ops.acquire(rank_, size_, isSend, peer, tag, fingerprint, data, bytes,
                                       request);
  }

  // Delivers a message from `from` to the receive `recv` posted on `to`.
  void matchLocked(
      int to, Op& recv, int from, const Fingerprint& theirs, const void* data, size_t bytes) {
    if (auto mismatch = findMismatch(to, from, recv.fingerprint, recv.bytes, theirs, bytes)) {
      failLocked(to, mismatch, /*propagate=*/true);
      return;
    }
    if (bytes > 0)
      copyBytes(recv.data, data, bytes);
    recv.complete = true;
    endpoint(to).changed.notify_all();
  }

  // wait() (all of `requests`), or waitSome() (`some`: one of them, or an interrupt()).
  bool waitFor(std::span<Request* const> requests, Deadline deadline, bool some) {
    std::unique_lock<std::mutex> lock(group_->mutex);
    Endpoint& self = endpoint(rank_);
    while (true) {
      throwIfFailedLocked();
      endpoint(rank_).ops.notifyCompleted();
      std::vector<int> waitingOn;
      bool anyComplete = false;
      for (Request* request : requests) {
        Op* op = findOp(request);
        if (op == nullptr) {
          CHORUS_CHECK_ARG(request->done, "rank ", rank_,
                           " (this process): wait() was given a request that was never posted");
          anyComplete = true;
          continue;
        }
        if (op->complete) {
          anyComplete = true;
          continue;
        }
        if (op->peer == kAnyPeer) {
          waitOnAnyPeerLocked(waitingOn);
          continue;
        }
        if (endpoint(op->peer).state != State::kOpen) {
          failLocked(rank_,
                     std::make_exception_ptr(makeClosedPeerError(rank_, op->peer, op->isSend)),
                     /*propagate=*/true);
          throwIfFailedLocked();
        }
        waitingOn.push_back(op->peer);
      }
      if (waitingOn.empty() || (some && anyComplete)) {
        finishLocked(requests);
        return true;
      }
      if (some && std::exchange(interrupted_, false))
        return false;
      if (deadline.expired()) {
        failLocked(rank_, std::make_exception_ptr(makeTimeoutError(rank_, waitingOn)), true);
        throwIfFailedLocked();
      }
      if (deadline.isNever()) {
        self.changed.wait(lock);
      } else {
        self.changed.wait_until(lock, deadline.at());
      }
    }
  }

  // Marks done and releases those of `requests` whose op is complete (all of them, after wait()).
  void finishLocked(std::span<Request* const> requests) {
    auto& ops = endpoint(rank_).ops;
    for (Request* request : requests) {
      Op* op = ops.find(request);
      if (op != nullptr && !op->complete)
        continue;
      if (op != nullptr)
        ops.release(op);
      request->done = true;
    }
  }

  // Fails endpoint `rank` with `error` (if it has not failed yet) and, when `propagate`, tells
  // every open peer, which fails with an error of the same type quoting this one.
  void failLocked(int rank, std::exception_ptr error, bool propagate) noexcept {
    Endpoint& failed = endpoint(rank);
    if (failed.failure)
      return;
    failed.failure = error;
    failed.dropRequests();
    failed.changed.notify_all();
    if (!propagate)
      return;
    try {
      auto encoded = detail::encodeError(error);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank || endpoint(peer).state != State::kOpen || endpoint(peer).failure) {
          continue;
        }
        failLocked(peer, decodeAbortNotice(peer, rank, encoded), /*propagate=*/false);
      }
    } catch (...) {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank && endpoint(peer).state == State::kOpen) {
          failLocked(peer, std::current_exception(), false);
        }
      }
    }
  }

  // This endpoint stops: its requests are forgotten, later calls throw, peers re-check.
  void leaveLocked() noexcept {
    Endpoint& self = endpoint(rank_);
    self.dropRequests();
    if (!self.failure)
      self.failure = std::make_exception_ptr(makeTransportClosedError(rank_));
    for (int peer = 0; peer < size_; ++peer) endpoint(peer).changed.notify_all();
  }

  std::shared_ptr<Group> group_;
  int rank_;
  int size_;
  bool interrupted_ = false;  // interrupt() since the last waitSome(); under group_->mutex
};

}  // namespace

std::vector<std::unique_ptr<Transport>> createLoopbackGroup(int size, SendCompletion completion) {
  CHORUS_CHECK_ARG(size >= 1, "a loopback group needs at least one rank, not ", size);
  auto group = std::make_shared<Group>();
  group->completion = completion;
  for (int rank = 0; rank < size; ++rank)
    group->endpoints.push_back(std::make_unique<Endpoint>(size));
  std::vector<std::unique_ptr<Transport>> transports;
  for (int rank = 0; rank < size; ++rank) {
    transports.push_back(std::make_unique<LoopbackTransport>(group, rank));
  }
  return transports;
}

void crashForTesting(Transport& transport) {
  auto* loopback = dynamic_cast<LoopbackTransport*>(&transport);
  CHORUS_CHECK_ARG(loopback != nullptr, "crashForTesting needs a loopback transport, not ",
                   transport.name());
  loopback->crash();
}

}  // namespace chorus::transport::loopback
