// Transport: point-to-point byte movement among the ranks of one communicator.
//
// A transport connects ranks 0..size()-1 (all pairs). Algorithms post sends and receives of raw
// bytes and wait for them; they never see sockets or the store. Each folder under src/transport/
// (tcp/, loopback/, later shm/ and mpi/) implements this interface with the same file names, and
// passes tests/transport/conformance_test.cc.
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
//  - Every message carries its sender's Fingerprint; the receiver compares it with its own and
//    the byte count with its buffer's. A difference is a MismatchError naming both ranks, the field
//    and both values. See Note [Collective fingerprint].
//  - wait() drives progress on every connection (so two ranks that send to each other never
//    deadlock) until the given requests complete. It throws PeerError when a peer died or aborted
//    (naming it), MismatchError, or TimeoutError at `deadline` (naming the peers of unfinished
//    requests).
//  - Failure is final: after wait() throws, or after abort(), every pending request is forgotten
//    (its buffers are no longer touched), peers are told (so they fail promptly too), and every
//    later call throws the first error again (postSend/postRecv too; they may also be where a
//    failure is first seen, e.g. a receive that matches a mismatched buffered message).
//  - A peer that closes without saying goodbye (a crash, kill -9) fails the transport as soon as
//  any
//    rank notices, even while waiting on someone else. A peer that said goodbye (close()) only
//    fails the requests that involve it.
//  - Threading: one thread at a time may post and wait. abort() may be called from any thread at
//    any time, including while another thread is inside wait(), which then throws.
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
#include "core/deadline.h"

namespace chorus::transport {

enum class Collective : uint8_t {
  kAllreduce,
  kAllgather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kAllToAll,
  kBarrier,
  kPointToPoint,
  kSplit,
};
std::string_view toString(Collective collective);

// Note [Collective fingerprint]
// Every collective is stamped with (sequence number, collective, reduce op, dtype, count, root),
// and every message it sends carries the stamp in its header. The receiver compares the stamp with
// its own before touching the payload, so ranks that called different collectives, or the same one
// with different arguments, get a MismatchError naming the field instead of corrupt data or a hang.
// The rank that notices aborts the transport, which tells every peer, so every rank raises.
// Algorithms send at least one (possibly empty) message on every rank for size > 1, even for
// count 0, so a mismatch is always seen. Cost: 32 bytes per message and one comparison.
struct Fingerprint {
  uint64_t sequence = 0;  // the communicator's collective counter (0 for point-to-point)
  uint64_t count = 0;     // elements (bytes for untyped collectives)
  int32_t root = -1;      // -1 when the collective has no root
  Collective collective = Collective::kBarrier;
  uint8_t reduceOp = kNoReduceOp;  // a chorus::ReduceOp, or kNoReduceOp
  uint8_t dataType = kNoDataType;  // a chorus::DataType, or kNoDataType
  uint8_t algorithm = 0;           // row of the collective's algorithm table (0 when untabled)

  static constexpr uint8_t kNoReduceOp = 0xff;
  static constexpr uint8_t kNoDataType = 0xff;

  // Name of the first field that differs ("collective", "sequence", "reduce_op", "dtype", "count",
  // "root", "algorithm"), or empty when equal.
  std::string_view firstDifference(const Fingerprint& other) const;
  // The value of a field, for messages ("allreduce", "sum", "float32", "1024", ...).
  std::string fieldValue(std::string_view field) const;
  // "allreduce #7 (float32 x 1024, sum)".
  std::string describe() const;
};
static_assert(sizeof(Fingerprint) == 24);

// Builds the MismatchError that a receiver raises: `self` is this rank's stamp, `theirs` the
// peer's.
MismatchError makeMismatchError(int selfRank,
                                int peerRank,
                                const Fingerprint& self,
                                const Fingerprint& theirs);
// Builds the MismatchError (field "bytes") a receiver raises when the fingerprints agree but the
// message has `sentBytes` where the posted receive expects `expectedBytes`.
MismatchError makeByteCountMismatchError(int selfRank,
                                         int peerRank,
                                         const Fingerprint& self,
                                         uint64_t expectedBytes,
                                         uint64_t sentBytes);

// The PeerError every transport (and the shm backend) raises when `peerRank` went away without a
// goodbye: killed, crashed, or exited without closing.
PeerError makeCrashedPeerError(int selfRank, int peerRank);

// The TimeoutError a transport raises at a deadline, naming the peers of unfinished requests
// (sorted, without repeats) in the message and in missingRanks().
TimeoutError makeTimeoutError(int selfRank, std::vector<int> peers);

// Tags at or above this value are reserved for collectives; point-to-point tags are below it.
inline constexpr uint64_t kCollectiveTag = uint64_t{1} << 62;

// A posted send or receive. Zero-initialize, post, wait.
struct Request {
  int peer = -1;
  bool done = false;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
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

  // Fails the transport with `reason` (a chorus::Error) and tells every peer, which then fail
  // with an error of the same type whose message quotes this one. Thread-safe, never throws.
  virtual void abort(std::exception_ptr reason) noexcept = 0;
  // Says goodbye to every peer and closes. Pending requests fail. Never throws. Idempotent.
  virtual void close() noexcept = 0;
  // The first error, once failed; null while healthy.
  virtual std::exception_ptr failure() const = 0;
};

}  // namespace chorus::transport
