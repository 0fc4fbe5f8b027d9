// Transport: point-to-point byte movement among the ranks of one communicator.
//
// A transport connects ranks 0..size()-1 (all pairs). Algorithms post sends and receives of raw
// bytes and wait for them; they never see sockets or the store. Each folder under src/transport/
// (tcp/, shm/, mpi/, loopback/, and faulty/, a wrapper for tests) implements this interface with
// the same file names, and passes the transport conformance suite (tests/transport/). What does
// not depend on how bytes move is written once: the wait loop, the failure latch, abort() and
// close() in core.h (TransportCore, which tcp, shm and mpi derive from), posted ops in op_pool.h,
// the matching of receives to messages in matching.h, and the standard errors in errors.h.
//
// Contract:
//  - postSend/postRecv register a request and return at once; the caller's Request and buffer must
//    stay valid until wait() returns for that request or the transport fails. `peer` must be
//    another rank (a transport has no connection to itself): anything else is InvalidArgumentError,
//    as is posting a Request that is already pending. A send may complete before the receiver posts
//    its receive (the message is buffered there: TCP), or only once it has (a rendezvous: MPI's
//    large messages, a bounded shared-memory queue, the loopback transport always). So callers
//    must be correct either way: never wait for a send before posting the receives whose arrival
//    the peer needs in order to post that send's receive (see the note on sends in
//    algorithms/stream.h). Completion of a send says nothing about the peer.
//  - Matching: messages from one peer with one tag are received in the order they were sent; the
//    k-th receive posted for (peer, tag) gets the k-th such message. Messages that arrive before
//    their receive is posted are buffered.
//  - A receive posted for kAnyPeer takes a message with its tag from whichever peer. As in MPI, a
//    message goes to the earliest posted receive that can take it, whether that one names the
//    message's peer or takes any peer's (so with receives from any peer about, the k-th receive
//    naming a peer may get a later message of that peer), and a message that arrived first goes to
//    the first receive posted after it that can take it; messages of one peer still come in order.
//    Once matched, its Request's `peer` names the sender. Its wait fails with PeerError only when
//    every peer has left.
//  - Every message carries its sender's Fingerprint; the receiver compares it with its own and
//    the byte count with its buffer's. A difference is a MismatchError naming both ranks, the field
//    and both values. See Note [Collective fingerprint] in core/collective.h.
//  - wait() drives progress on every connection (so two ranks that send to each other never
//    deadlock) until the given requests complete. It throws PeerError when a peer died or aborted
//    (naming it), MismatchError, or TimeoutError at `deadline` (naming the peers of unfinished
//    requests).
//  - Failure is final: after wait() throws, or after abort(), every pending request is forgotten
//    (its buffers are no longer touched), peers are told (so they fail promptly too), and every
//    later call throws the first error again (postSend/postRecv too; they may also be where a
//    failure is first seen, e.g. a receive that matches a mismatched buffered message).
//  - A peer that closes without saying goodbye (a crash, kill -9) fails the transport as soon as
//    any rank notices, even while waiting on someone else. A peer that said goodbye (close()) only
//    fails the requests that involve it.
//  - waitSome() is wait() for overlapping point-to-point operations (Note [Point-to-point
//    overlap] in runtime/communicator_state.h): it returns as soon as at least one of the requests
//    is complete (those complete are marked done and returned to the pool; the others stay posted),
//    or when interrupt() has been called since the last waitSome() returned, whichever comes first.
//    It fails as wait() does.
//  - poll() moves posted requests along without waiting, for a thread that waits on something
//    else meanwhile (the shm backend's collectives while transfers are in flight: Note
//    [Collectives and transfers together] in runtime/communicator_transfers.cc). A request it
//    completes is marked
//    done by the next wait() or waitSome() that names it (its listener, if any, hears at once). It
//    throws the transport's failure, and fails the transport for an error it meets while moving
//    bytes (an abort, a mismatch, a peer that crashed); it never times out, and it does not look
//    for peers that left or died, which the next wait does.
//  - Threading: one thread at a time may post, poll and wait (pollWhileWaiting's function may
//    post and poll while that thread waits: it is called without the lock). abort() and
//    interrupt() may be
//    called from any thread at any time, including while another thread is inside wait(), which
//    then throws (abort) or, in waitSome(), returns (interrupt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/error.h"
#include "chorus/types.h"
#include "core/collective.h"
#include "core/deadline.h"
#include "core/function_ref.h"
#include "transport/errors.h"

namespace chorus::transport {

// Tags at or above this value are reserved for collectives; point-to-point tags are below it.
inline constexpr uint64_t kCollectiveTag = uint64_t{1} << 62;

// The `peer` of a receive that takes a message from any peer (see Matching above). Not -1, which
// a ring computation gone wrong yields, so that such a peer stays an InvalidArgumentError.
inline constexpr int kAnyPeer = -2;

struct Request;

// Told that a posted request's bytes have all moved (Request::listener).
class CompletionListener {
 public:
  virtual void completed(Request& request) noexcept = 0;

 protected:
  ~CompletionListener() = default;
};

// A posted send or receive. Zero-initialize, post, wait. A receive posted for kAnyPeer gets its
// sender's rank in `peer` once a message matched it.
struct Request {
  int peer = -1;
  bool done = false;
  // May be set while the request is posted, on the thread that posts and waits: the first pass of
  // a wait(), waitSome() or poll() (whichever requests it names) that finds this request's bytes
  // moved calls listener->completed(*this) on that thread, with the transport's lock held (so it
  // must not call the transport), and clears it. `done` is still set by a wait that names it.
  CompletionListener* listener = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank of member `member`, by which errors name it (Note [One rank numbering] in
  // core/rank_names.h); the member itself where the transport was given no names.
  virtual int worldRank(int member) const { return member; }
  // "tcp", "loopback", ...
  virtual std::string_view name() const = 0;

  virtual void postSend(int peer,
                        uint64_t tag,
                        const Fingerprint& fingerprint,
                        const void* data,
                        size_t bytes,
                        Request& request) = 0;
  virtual void postRecv(int peer,
                        uint64_t tag,
                        const Fingerprint& fingerprint,
                        void* data,
                        size_t bytes,
                        Request& request) = 0;
  virtual void wait(std::span<Request* const> requests, Deadline deadline) = 0;
  // Returns true when at least one request completed, false when interrupted first.
  virtual bool waitSome(std::span<Request* const> requests, Deadline deadline) = 0;
  // Makes the current or next waitSome() return. Thread-safe, never throws.
  virtual void interrupt() noexcept = 0;
  // Moves posted requests along, without waiting (see poll() above). The default suits a
  // transport whose requests move without a waiter (loopback: the sender matches at once).
  virtual void poll() { rethrowIfFailed(); }
  // Until called again with an empty one, every pass of wait() and waitSome() also calls `poll`
  // (which must outlive that), with no lock held, and while it returns true sleeps at most a
  // millisecond: the front end posts the transfers issued meanwhile, on this transport or another,
  // and moves those on another (Note [Collectives and transfers together] in
  // runtime/communicator_transfers.cc); wake() wakes the wait for it. Its exceptions fail this
  // transport. Called by the thread that posts and waits, between its waits. The default ignores
  // it (loopback, whose requests move without a waiter).
  virtual void pollWhileWaiting(detail::FunctionRef<bool()> /*poll*/) {}
  // Makes the wait that runs now, or the next pass of one, call its pollWhileWaiting function soon
  // instead of sleeping on; unlike interrupt(), it ends no wait and leaves nothing for the next.
  // Any thread, never throws. The default does nothing (a transport whose waits never sleep).
  virtual void wake() noexcept {}

  // Fails the transport with `reason` (a chorus::Error) and tells every peer, which then fail
  // with an error of the same type whose message quotes this one. Thread-safe, never throws.
  virtual void abort(std::exception_ptr reason) noexcept = 0;
  // Says goodbye to every peer and closes. Pending requests fail. Never throws. Idempotent.
  virtual void close() noexcept = 0;
  // The first error, once failed; null while healthy.
  virtual std::exception_ptr failure() const = 0;

 private:
  void rethrowIfFailed() const {
    if (std::exception_ptr error = failure())
      std::rethrow_exception(error);
  }
};

}  // namespace chorus::transport
