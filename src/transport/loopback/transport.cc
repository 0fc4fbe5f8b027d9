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
// Cost: one copy per message (two when it arrives before its receive), all under one group lock.
// Limits: for tests only; memory for unexpected messages is unbounded.
#include "transport/loopback/transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/error_codec.h"
#include "transport/op_pool.h"

namespace chorus::transport::loopback {
namespace {

using Key = std::pair<int, uint64_t>;  // (peer, tag)

struct Message {
  Fingerprint fingerprint;
  std::vector<uint8_t> payload;
  const Request* send = nullptr;  // the sender's request, completed when a receive matches
};

struct Op {
  Request* request = nullptr;
  bool isSend = false;
  int peer = -1;
  uint64_t tag = 0;
  Fingerprint fingerprint;
  void* data = nullptr;
  size_t bytes = 0;
  bool complete = false;
};

enum class State { kOpen, kClosed, kCrashed };

struct Endpoint {
  std::condition_variable changed;
  State state = State::kOpen;
  std::exception_ptr failure;
  // Posted and not yet returned by wait(); few at a time, so searched linearly.
  std::vector<std::unique_ptr<Op>> ops;
  std::map<Key, std::deque<Op*>> postedRecvs;
  std::map<Key, std::deque<Message>> unexpected;

  void dropRequests() {
    ops.clear();
    postedRecvs.clear();
    unexpected.clear();
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
    Op& op = addOp(peer, tag, fingerprint, const_cast<void*>(data), bytes, request);
    op.isSend = true;
    Endpoint& to = endpoint(peer);
    if (to.state != State::kOpen)
      return;  // wait() reports the goodbye
    if (to.failure) {
      op.complete = true;
      return;  // it told us (or will); nothing reads the message
    }
    auto found = to.postedRecvs.find({rank_, tag});
    if (found != to.postedRecvs.end() && !found->second.empty()) {
      Op* recv = found->second.front();
      found->second.pop_front();
      op.complete = true;
      matchLocked(peer, *recv, rank_, fingerprint, data, bytes);
      return;
    }
    const auto* begin = static_cast<const uint8_t*>(data);
    const bool eager = group_->completion == SendCompletion::kWhenBuffered;
    op.complete = eager;
    to.unexpected[{rank_, tag}].push_back(
        Message{fingerprint, {begin, begin + bytes}, eager ? nullptr : &request});
  }

  void postRecv(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                void* data,
                size_t bytes,
                Request& request) override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    Op& op = addOp(peer, tag, fingerprint, data, bytes, request);
    Endpoint& self = endpoint(rank_);
    auto found = self.unexpected.find({peer, tag});
    if (found != self.unexpected.end() && !found->second.empty()) {
      Message message = std::move(found->second.front());
      found->second.pop_front();
      completeSendLocked(peer, message.send);
      matchLocked(rank_, op, peer, message.fingerprint, message.payload.data(),
                  message.payload.size());
      return;
    }
    self.postedRecvs[{peer, tag}].push_back(&op);
  }

  void wait(std::span<Request* const> requests, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    Endpoint& self = endpoint(rank_);
    while (true) {
      throwIfFailedLocked();
      std::vector<int> waitingOn;
      for (Request* request : requests) {
        Op* op = findOp(request);
        if (op == nullptr) {
          CHORUS_CHECK_ARG(request->done, "rank ", rank_,
                           " (this process): wait() was given a request that was never posted");
          continue;
        }
        if (op->complete)
          continue;
        if (endpoint(op->peer).state != State::kOpen) {
          failLocked(
              rank_,
              std::make_exception_ptr(PeerError(
                  detail::concat("rank ", rank_, " (this process): rank ", op->peer,
                                 " has closed its communicator, so a ",
                                 op->isSend ? "send to" : "receive from", " it cannot complete"),
                  op->peer)),
              /*propagate=*/true);
          throwIfFailedLocked();
        }
        waitingOn.push_back(op->peer);
      }
      if (waitingOn.empty()) {
        finishLocked(requests);
        return;
      }
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

  void abort(std::exception_ptr reason) noexcept override {
    if (!reason) {
      reason = std::make_exception_ptr(
          InternalError(detail::concat("rank ", rank_, " (this process): aborted")));
    }
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

  Op* findOp(const Request* request) const { return findOp(rank_, request); }
  Op* findOp(int rank, const Request* request) const {
    for (const auto& op : endpoint(rank).ops) {
      if (op->request == request)
        return op.get();
    }
    return nullptr;
  }

  Op& addOp(int peer,
            uint64_t tag,
            const Fingerprint& fingerprint,
            void* data,
            size_t bytes,
            Request& request) {
    throwIfFailedLocked();
    checkPost(rank_, size_, peer, data, bytes, findOp(&request) != nullptr);
    request.peer = peer;
    request.done = false;
    auto op = std::make_unique<Op>();
    op->request = &request;
    op->peer = peer;
    op->tag = tag;
    op->fingerprint = fingerprint;
    op->data = data;
    op->bytes = bytes;
    auto& ops = endpoint(rank_).ops;
    ops.push_back(std::move(op));
    return *ops.back();
  }

  // Delivers a message from `from` to the receive `recv` posted on `to`.
  void matchLocked(
      int to, Op& recv, int from, const Fingerprint& theirs, const void* data, size_t bytes) {
    if (!recv.fingerprint.firstDifference(theirs).empty()) {
      auto error = makeMismatchError(to, from, recv.fingerprint, theirs);
      failLocked(to, std::make_exception_ptr(error), true);
      return;
    }
    if (bytes != recv.bytes) {
      auto error = makeByteCountMismatchError(to, from, recv.fingerprint, recv.bytes, bytes);
      failLocked(to, std::make_exception_ptr(error), true);
      return;
    }
    if (bytes > 0)
      std::memcpy(recv.data, data, bytes);
    recv.complete = true;
    endpoint(to).changed.notify_all();
  }

  void finishLocked(std::span<Request* const> requests) {
    auto& ops = endpoint(rank_).ops;
    for (Request* request : requests) request->done = true;
    std::erase_if(ops, [](const std::unique_ptr<Op>& op) { return op->request->done; });
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
        auto prefix = detail::concat("rank ", peer, " (this process): aborted because rank ", rank,
                                     " reported: ");
        failLocked(peer, detail::decodeError(encoded, prefix, rank), /*propagate=*/false);
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
    if (!self.failure) {
      self.failure = std::make_exception_ptr(
          Error(detail::concat("rank ", rank_,
                               " (this process): this transport is closed; create a new "
                               "communicator to keep communicating")));
    }
    for (int peer = 0; peer < size_; ++peer) endpoint(peer).changed.notify_all();
  }

  std::shared_ptr<Group> group_;
  int rank_;
  int size_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> createLoopbackGroup(int size, SendCompletion completion) {
  CHORUS_CHECK_ARG(size >= 1, "a loopback group needs at least one rank, not ", size);
  auto group = std::make_shared<Group>();
  group->completion = completion;
  for (int rank = 0; rank < size; ++rank) group->endpoints.push_back(std::make_unique<Endpoint>());
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
