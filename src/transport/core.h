// TransportCore: the part of the Transport contract (transport.h) that does not depend on how
// bytes move, written once. A transport derives from TransportCore<Op> and supplies only the
// hooks below; the core owns the lock, the posted ops (OpPool), the wait loop, the failure latch,
// abort() from another thread, close() and the standard errors (errors.h). The tcp, shm and mpi
// transports are built on it; the loopback transport, whose ranks share one lock and fail one
// another, uses the same pieces (ops, matching, errors) without it.
//
// How the core drives the hooks:
//  - postSend/postRecv: with the lock held, throw the failure if failed, checkTag(), register the
//    op (checkPost's argument checks), then startSend(op) / startRecv(op). An error there fails the
//    transport (peers are told) and is thrown. A receive from kAnyPeer is bound to the peer that
//    hasMessageFrom() finds (asked in turn, from the peer after the last one found) and started as
//    that peer's; else it waits in anyPeerReceives(), which the transport shares with its
//    PeerMatchings (matching.h) or, if it has none, binds itself.
//  - poll(): with the lock held, take up an abort(), progress(), then pollEvents(); errors as in
//    wait(). Each pass of the wait loop, and poll(), then tells the listeners of completed ops
//    (Request::listener).
//  - pollWhileWaiting(poll): each pass of the wait loop also calls `poll`, with the lock dropped
//    (it may post here), and while it returns true idle() is given a deadline at most a
//    millisecond away.
//  - wait(): with the lock held, beginWait(), then loop: take up an abort() from another thread;
//    progress(); done when every op is complete; an incomplete op whose peer has left
//    (peerLeft(peer)) is a PeerError; past the deadline a TimeoutError naming the peers still
//    owing; the stall watch (core/stall_watch.h); then idle(), which waits a while for something
//    to change and may drop the lock (abort() then gets in). Any error fails the transport, peers
//    told, and is thrown.
//  - fail(error, tellPeers): the first error is latched; onFailure() forgets the ops' buffers and,
//    when asked, tells the peers; then every op is released. Later calls throw the first error.
//  - abort(reason), from any thread: records the reason, wakeWaiter() (no lock held), then takes
//    the lock and fails with it, peers told.
//  - close(): fails with "this transport is closed", peers not told, then sayGoodbye(). The
//    derived destructor must call close() (hooks cannot run from the core's destructor).
//  - crash() (test hook): vanish(), then fails with "crashed (test hook)", peers not told.
// Hooks run with the lock held, except wakeWaiter().
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/rank_names.h"
#include "core/stall_watch.h"
#include "transport/errors.h"
#include "transport/matching.h"
#include "transport/op_pool.h"
#include "transport/transport.h"

namespace chorus::transport {

template <typename Op>
class TransportCore : public Transport {
 public:
  int rank() const final { return rank_; }
  int size() const final { return size_; }

  void postSend(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                const void* data,
                size_t bytes,
                Request& request) final {
    post(/*isSend=*/true, peer, tag, fingerprint, const_cast<void*>(data), bytes, request);
  }
  void postRecv(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                void* data,
                size_t bytes,
                Request& request) final {
    post(/*isSend=*/false, peer, tag, fingerprint, data, bytes, request);
  }
  void wait(std::span<Request* const> requests, Deadline deadline) final;
  bool waitSome(std::span<Request* const> requests, Deadline deadline) final;
  void poll() final;
  void pollWhileWaiting(detail::FunctionRef<bool()> poll) final { whileWaiting_ = poll; }
  void interrupt() noexcept final {
    interruptWanted_.store(true, std::memory_order_release);
    wakeWaiter();
  }
  void wake() noexcept final {
    wakeWanted_.store(true, std::memory_order_seq_cst);
    wakeWaiter();
  }
  void abort(std::exception_ptr reason) noexcept final;
  void close() noexcept final;
  std::exception_ptr failure() const final {
    if (!failed_.load(std::memory_order_acquire))
      return nullptr;  // the common case, without the lock
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

  // Test hook: leaves without goodbye, as a killed process would (vanish()).
  void crash() noexcept;

  // The world rank of member `member`, by which errors name it (Note [One rank numbering]).
  int worldRank(int member) const override { return names_(member); }

 protected:
  // The wait scratch is sized up front for a send and a receive per peer, so that the first wait
  // that finds that many incomplete does not allocate (a warmed call allocates nothing).
  TransportCore(int rank, int size, detail::RankNames names)
      : rank_(rank), size_(size), names_(std::move(names)) {
    waitOps_.reserve(2 * static_cast<size_t>(size) + 2);
    waitingOn_.reserve(2 * static_cast<size_t>(size) + 2);
  }

  const detail::RankNames& names() const { return names_; }

  // The lock-held helpers hooks may use.
  void throwIfFailed() const {
    if (failure_)
      std::rethrow_exception(failure_);
  }
  [[noreturn]] void rethrowFailure() const { std::rethrow_exception(failure_); }
  void fail(std::exception_ptr error, bool tellPeers) noexcept;
  bool abortRequested() const { return abortWanted_.load(std::memory_order_acquire); }
  bool interruptRequested() const { return interruptWanted_.load(std::memory_order_acquire); }
  // wake() since this pass of the wait began: idle() must not sleep.
  bool wakeRequested() const { return wakeWanted_.load(std::memory_order_seq_cst); }
  OpPool<Op>& ops() { return ops_; }
  const OpPool<Op>& ops() const { return ops_; }
  // The receives from any peer that nothing matched yet (matching.h).
  AnyPeerReceives<Op>& anyPeerReceives() { return anyPeerReceives_; }

  // The hooks: how this transport moves bytes.
  // InvalidArgumentError when this transport cannot carry `tag`; called before the op exists.
  virtual void checkTag(uint64_t /*tag*/) const {}
  // `op` was just posted (its own fields still hold their last values): start moving it.
  virtual void startSend(Op& op) = 0;
  virtual void startRecv(Op& op) = 0;
  // Whether `peer` sent a message with `tag` that waits buffered for its receive. Default: false (a
  // transport that keeps no such messages itself, and binds receives from any peer as they come).
  virtual bool hasMessageFrom(int /*peer*/, uint64_t /*tag*/) { return false; }
  // A wait() begins.
  virtual void beginWait() {}
  // The tag of the first message from `peer` that waits buffered for its receive, when that is a
  // send's (Collective::kPointToPoint), for a timeout's hint (Note [A receive for another tag]).
  // Default: none.
  virtual std::optional<uint64_t> bufferedSendTag(int /*peer*/) { return std::nullopt; }
  // Moves what can move now, without blocking.
  virtual void progress() {}
  // For poll(), after progress(): takes up what has come in, without blocking, where progress()
  // leaves that to idle() (tcp: its epoll events). Default: nothing more.
  virtual void pollEvents() {}
  // `peer` closed on purpose, and nothing more will come from it.
  virtual bool peerLeft(int peer) const = 0;
  // Throws the error of a peer that died, if one has (an incomplete op's peer left: a death it
  // saw may be why, Note [A departure after a death]). Default: nothing to look at.
  virtual void checkForDeadPeers() {}
  // Waits until something may have changed, at most until `deadline` or a stall check is due
  // (stall::wakeBy). `now` is the time the pass read (Note [One clock read per pass]). May unlock
  // `lock` meanwhile, and must hold it again on return.
  virtual void idle(Deadline deadline,
                    Clock::time_point now,
                    std::unique_lock<std::mutex>& lock) = 0;
  // The transport just failed with `error`: forget every op's buffers and, if `tellPeers`, tell
  // every peer. Ops are released afterwards. Never throws.
  virtual void onFailure(std::exception_ptr error, bool tellPeers) noexcept = 0;
  // abort() or interrupt() from another thread: make a blocked idle() return soon (also when it
  // comes just before idle() blocks). No lock held. Never throws.
  virtual void wakeWaiter() noexcept {}
  // close(), after failing: say goodbye to every peer and let go of the links. Never throws.
  virtual void sayGoodbye() noexcept = 0;
  // crash(): let go of the links as a killed process would. Never throws.
  virtual void vanish() noexcept {}

 private:
  void post(bool isSend,
            int peer,
            uint64_t tag,
            const Fingerprint& fingerprint,
            void* data,
            size_t bytes,
            Request& request);
  // Collects the ops of `requests` into waitOps_ (InvalidArgumentError for one never posted).
  void collectWaitOps(std::span<Request* const> requests);
  // The loop of wait() and waitSome(): until done() (or, when `interruptible`, an interrupt()),
  // failing the transport on any error. Returns whether done() became true.
  template <typename Done>
  bool waitLoop(Deadline deadline,
                std::unique_lock<std::mutex>& lock,
                bool interruptible,
                Done done);
  // Marks done and releases those of `requests` whose op is complete.
  void finishComplete(std::span<Request* const> requests);
  // Fails with the reason of an abort() that another thread asked for, and throws it; else nothing.
  void takeUpAbort();
  // Calls whileWaiting_ without the lock (held again on return, also when it throws); returns its
  // answer.
  bool callWhileWaiting(std::unique_lock<std::mutex>& lock);
  bool allComplete();
  void waitOnAnyPeer();
  std::string tagHint();
  void startAnyPeerRecv(Op& op);
  bool anyComplete();

  const int rank_;
  const int size_;
  const detail::RankNames names_;  // Note [One rank numbering]

  mutable std::mutex mutex_;
  std::exception_ptr failure_;
  std::atomic<bool> failed_{false};  // failure_ is set (read by failure() without the lock)
  bool closed_ = false;
  // abort() from another thread: the waiter sees the flag within one pass and fails with it.
  std::atomic<bool> abortWanted_{false};
  std::mutex abortMutex_;
  std::exception_ptr abortReason_;
  std::atomic<bool> interruptWanted_{false};  // interrupt(): taken up by the next waitSome()
  std::atomic<bool> wakeWanted_{false};       // wake(): cleared as each pass of a wait begins
  detail::FunctionRef<bool()> whileWaiting_;  // pollWhileWaiting's
  static constexpr std::chrono::milliseconds kPollSlice{1};

  OpPool<Op> ops_;
  AnyPeerReceives<Op> anyPeerReceives_;
  int lastAnyPeer_ = 0;       // the peer whose message a receive from any peer found buffered last
  std::vector<Op*> waitOps_;  // scratch for wait()
  std::vector<int> waitingOn_;  // scratch for wait(): the world ranks still owing something
};

template <typename Op>
void TransportCore<Op>::post(bool isSend,
                             int peer,
                             uint64_t tag,
                             const Fingerprint& fingerprint,
                             void* data,
                             size_t bytes,
                             Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  throwIfFailed();
  checkTag(tag);
  Op& op = ops_.acquire(rank_, size_, isSend, peer, tag, fingerprint, data, bytes, request);
  try {
    if (isSend) {
      startSend(op);
    } else if (peer != kAnyPeer) {
      startRecv(op);
    } else {
      startAnyPeerRecv(op);
    }
  } catch (...) {
    fail(std::current_exception(), /*tellPeers=*/true);
    rethrowFailure();
  }
}

template <typename Op>
void TransportCore<Op>::startAnyPeerRecv(Op& op) {
  for (int i = 1; i <= size_; ++i) {
    const int peer = (lastAnyPeer_ + i) % size_;
    if (peer != rank_ && hasMessageFrom(peer, op.tag)) {
      lastAnyPeer_ = peer;
      AnyPeerReceives<Op>::bind(op, peer);
      startRecv(op);
      return;
    }
  }
  anyPeerReceives_.add(&op);
}

// True when every op of waitOps_ is complete; otherwise fills waitingOn_ with the peers still
// owing something (every peer still there, for a receive from any peer). Throws PeerError when an
// op waits on a peer that left (on every peer, for a receive from any peer).
//
// Note [A departure after a death]: a peer that saw another rank die fails and closes, and its
// goodbye can reach a rank waiting on it before that rank's own liveness check sees the death. The
// death is the cause, and every survivor should name the dead rank, so a departure is reported
// only once no peer is found dead (as ShmGroup does, Note [Only needed peers fail a wait]).
template <typename Op>
bool TransportCore<Op>::allComplete() {
  waitingOn_.clear();
  for (Op* op : waitOps_) {
    if (op == nullptr || op->complete)
      continue;
    if (op->peer == kAnyPeer) {
      waitOnAnyPeer();
      continue;
    }
    if (peerLeft(op->peer)) {
      checkForDeadPeers();
      throw makeClosedPeerError(worldRank(rank_), worldRank(op->peer), op->isSend);
    }
    waitingOn_.push_back(worldRank(op->peer));
  }
  return waitingOn_.empty();
}

// allComplete() for a receive from any peer that nothing matched yet.
template <typename Op>
void TransportCore<Op>::waitOnAnyPeer() {
  int left = -1;
  bool someoneThere = false;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_)
      continue;
    if (peerLeft(peer)) {
      left = peer;
      continue;
    }
    someoneThere = true;
    if (std::find(waitingOn_.begin(), waitingOn_.end(), worldRank(peer)) == waitingOn_.end())
      waitingOn_.push_back(worldRank(peer));
  }
  if (!someoneThere) {
    checkForDeadPeers();
    throw makeAllPeersClosedError(worldRank(rank_), worldRank(left));
  }
}

// Note [A receive for another tag]
// A receive that times out while its peer's message waits buffered under another tag is a send and
// a recv whose tags disagree, the most common point-to-point mistake; the TimeoutError says so
// instead of only that the peer never sent. Collectives' messages are not named: their tags are
// chorus's own.
template <typename Op>
std::string TransportCore<Op>::tagHint() {
  for (const Op* op : waitOps_) {
    if (op == nullptr || op->complete || op->isSend || op->peer == kAnyPeer)
      continue;
    const std::optional<uint64_t> sent = bufferedSendTag(op->peer);
    if (sent && *sent != op->tag) {
      return detail::concat("; rank ", worldRank(op->peer), " did send a message with tag ", *sent,
                            ", which waits unreceived, while this rank receives tag ", op->tag,
                            " from it: do the send's and the recv's tags match?");
    }
  }
  return {};
}

// True when some op of waitOps_ is complete (or there is none); otherwise as allComplete().
template <typename Op>
bool TransportCore<Op>::anyComplete() {
  for (Op* op : waitOps_) {
    if (op == nullptr || op->complete)
      return true;
  }
  return waitOps_.empty() || allComplete();
}

template <typename Op>
void TransportCore<Op>::collectWaitOps(std::span<Request* const> requests) {
  waitOps_.clear();
  for (Request* request : requests) {
    Op* op = ops_.find(request);
    CHORUS_CHECK_ARG(op != nullptr || request->done, "rank ", worldRank(rank_),
                     " (this process): wait() was given a request that was never posted");
    waitOps_.push_back(op);
  }
}

// Note [One clock read per pass]
// A pass of the wait loop reads the clock once, for the deadline, the stall check and idle()'s
// spin phases alike: on a VM a precise read costs 25-40 ns, and every read in a pass delays the
// pass that sees a message arrive. The stall check's time is asked again only after a check ran
// (nothing else moves it during a wait).
template <typename Op>
template <typename Done>
bool TransportCore<Op>::waitLoop(Deadline deadline,
                                 std::unique_lock<std::mutex>& lock,
                                 bool interruptible,
                                 Done done) {
  try {
    beginWait();
    Clock::time_point stallCheckAt = stall::nextCheckAt();
    while (true) {
      takeUpAbort();
      progress();
      ops_.notifyCompleted();
      bool pollSoon = false;
      if (whileWaiting_) {
        // Cleared before the poll looks: a wake() after that keeps idle() awake (wakeRequested).
        wakeWanted_.store(false, std::memory_order_seq_cst);
        pollSoon = callWhileWaiting(lock);
        throwIfFailed();  // abort() from another thread, while the lock was dropped
      } else if (wakeWanted_.load(std::memory_order_relaxed)) {
        wakeWanted_.store(false, std::memory_order_relaxed);  // one meant for a collective's wait
      }
      if (done())
        return true;
      if (interruptible && interruptWanted_.exchange(false, std::memory_order_acq_rel))
        return false;
      const Clock::time_point now = Clock::now();  // Note [One clock read per pass]
      if (now >= deadline.at())
        throw makeTimeoutError(worldRank(rank_), waitingOn_, tagHint());
      if (now >= stallCheckAt) {
        stall::onStalled(waitingOn_);
        stallCheckAt = stall::nextCheckAt();
      }
      // While transfers it moves are in flight, no sleep lasts past a millisecond.
      idle(pollSoon ? Deadline::earliest(deadline, Deadline(now + kPollSlice)) : deadline, now,
           lock);
      throwIfFailed();  // abort() from another thread
    }
  } catch (...) {
    fail(std::current_exception(), /*tellPeers=*/true);  // no-op when already failed
    rethrowFailure();
  }
}

// pollWhileWaiting's function, with the lock dropped: it may post on this transport (the front
// end's transfers issued while a collective waits here), and it does not block.
template <typename Op>
bool TransportCore<Op>::callWhileWaiting(std::unique_lock<std::mutex>& lock) {
  struct Relock {
    std::unique_lock<std::mutex>& lock;
    ~Relock() { lock.lock(); }
  };
  lock.unlock();
  Relock relock{lock};
  return whileWaiting_();
}

template <typename Op>
void TransportCore<Op>::takeUpAbort() {
  if (!abortRequested())
    return;
  std::lock_guard<std::mutex> abortLock(abortMutex_);
  fail(abortReason_, /*tellPeers=*/true);
  rethrowFailure();
}

template <typename Op>
void TransportCore<Op>::finishComplete(std::span<Request* const> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    Op* op = waitOps_[i];
    if (op != nullptr && !op->complete)
      continue;
    requests[i]->done = true;
    if (op != nullptr)
      ops_.release(op);
  }
}

template <typename Op>
void TransportCore<Op>::wait(std::span<Request* const> requests, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  throwIfFailed();
  collectWaitOps(requests);
  waitLoop(deadline, lock, /*interruptible=*/false, [this] { return allComplete(); });
  finishComplete(requests);
}

template <typename Op>
bool TransportCore<Op>::waitSome(std::span<Request* const> requests, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  throwIfFailed();
  collectWaitOps(requests);
  const bool completed =
      waitLoop(deadline, lock, /*interruptible=*/true, [this] { return anyComplete(); });
  // An interrupt() that came while it returned for a completion is spent too: the caller looks
  // for what was pushed before it waits again (a flag left set would keep every later wait awake).
  interruptWanted_.store(false, std::memory_order_release);
  finishComplete(requests);
  return completed;
}

template <typename Op>
void TransportCore<Op>::poll() {
  std::unique_lock<std::mutex> lock(mutex_);
  throwIfFailed();
  try {
    takeUpAbort();
    progress();
    pollEvents();
    throwIfFailed();
    ops_.notifyCompleted();
  } catch (...) {
    fail(std::current_exception(), /*tellPeers=*/true);  // no-op when already failed
    rethrowFailure();
  }
}

template <typename Op>
void TransportCore<Op>::fail(std::exception_ptr error, bool tellPeers) noexcept {
  if (failure_)
    return;
  failure_ = error;
  failed_.store(true, std::memory_order_release);
  onFailure(error, tellPeers);
  anyPeerReceives_.clear();
  ops_.releaseAll();
}

template <typename Op>
void TransportCore<Op>::abort(std::exception_ptr reason) noexcept {
  if (!reason)
    reason = std::make_exception_ptr(makeAbortedError(worldRank(rank_)));
  {
    std::lock_guard<std::mutex> abortLock(abortMutex_);
    if (!abortReason_)
      abortReason_ = reason;
  }
  abortWanted_.store(true, std::memory_order_release);
  wakeWaiter();
  std::lock_guard<std::mutex> lock(mutex_);
  fail(reason, /*tellPeers=*/true);
}

template <typename Op>
void TransportCore<Op>::close() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_)
    return;
  closed_ = true;
  fail(std::make_exception_ptr(makeTransportClosedError(worldRank(rank_))), /*tellPeers=*/false);
  sayGoodbye();
}

template <typename Op>
void TransportCore<Op>::crash() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_)
    return;
  closed_ = true;
  vanish();
  fail(std::make_exception_ptr(makeCrashedForTestingError(worldRank(rank_))), /*tellPeers=*/false);
}

}  // namespace chorus::transport
