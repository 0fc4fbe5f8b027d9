// The collective descriptor: which collective a call is (Collective) and its stamp (Fingerprint),
// shared by every layer that runs or checks a collective: the communicator front end stamps each
// call, transports carry the stamp in every message and compare it, backends and the census
// report it. Lives in core so that no layer reaches past the one below it for these words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chorus/error.h"
#include "chorus/types.h"

namespace chorus {

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
  kAllToAllV,   // all_to_all with a block size per pair (MPI's Alltoallv)
  kAllgatherV,  // allgather with a block size per rank (MPI's Allgatherv)
};
std::string_view toString(Collective collective);

// Note [Collective fingerprint]
// Every collective is stamped with (sequence number, collective, reduce op, dtype, count, root,
// shape), and every message it sends carries the stamp in its header. The receiver compares the
// stamp with its own before touching the payload, so ranks that called different collectives, or
// the same one with different arguments, get a MismatchError naming the field instead of corrupt
// data or a hang. The rank that notices aborts the transport, which tells every peer, so every rank
// raises. Algorithms send at least one (possibly empty) message on every rank for size > 1, even
// for count 0, so a mismatch is always seen. Cost: 32 bytes per message and one comparison.
//
// `shape` is a signature of the tensors' shapes and the call's axes (shapeSignature in
// runtime/communicator_ops.h): calls whose element counts agree but whose shapes or axes differ
// (an allgather of (2, 3) on one rank and (3, 2) on another, or along axis 0 on one and 1 on
// another) would otherwise move the right number of bytes into the wrong places, silently.
struct Fingerprint {
  uint64_t sequence = 0;  // the communicator's collective counter (0 for point-to-point)
  uint64_t count = 0;     // elements (bytes for untyped collectives)
  int32_t root = -1;      // -1 when the collective has no root
  Collective collective = Collective::kBarrier;
  uint8_t reduceOp = kNoReduceOp;  // a chorus::ReduceOp, or kNoReduceOp
  uint8_t dataType = kNoDataType;  // a chorus::DataType, or kNoDataType
  uint8_t algorithm = 0;           // row of the collective's algorithm table (0 when untabled)
  uint64_t shape = 0;  // the shapes and axes, hashed (0 where they may differ: send/recv, barrier)

  bool operator==(const Fingerprint&) const = default;

  static constexpr uint8_t kNoReduceOp = 0xff;
  static constexpr uint8_t kNoDataType = 0xff;

  // Name of the first field that differs ("collective", "sequence", "reduce_op", "dtype", "count",
  // "root", "shape", "algorithm"), or empty when equal.
  std::string_view firstDifference(const Fingerprint& other) const;
  // The value of a field, for messages ("allreduce", "sum", "float32", "1024", ...).
  std::string fieldValue(std::string_view field) const;
  // "allreduce #7 (float32 x 1024, sum)".
  std::string describe() const;
};
static_assert(sizeof(Fingerprint) == 32);

// The MismatchError a receiver raises: `self` is this rank's stamp, `theirs` the peer's; both
// ranks are world ranks (Note [One rank numbering]).
MismatchError makeMismatchError(int selfRank,
                                int peerRank,
                                const Fingerprint& self,
                                const Fingerprint& theirs);
// The MismatchError (field "bytes") a receiver raises when the fingerprints agree but the message
// has `sentBytes` where the posted receive expects `expectedBytes`.
MismatchError makeByteCountMismatchError(int selfRank,
                                         int peerRank,
                                         const Fingerprint& self,
                                         uint64_t expectedBytes,
                                         uint64_t sentBytes);
// The MismatchError (field "bytes") of an all_to_all_v whose pair disagrees: `sender` (a world
// rank) sends `sentBytes` to `receiver`, which expects `expectedBytes` from it. Every rank that
// sees both numbers raises this same error, so the message names the pair, not the raiser.
MismatchError makeSplitMismatchError(int sender,
                                     int receiver,
                                     const Fingerprint& fingerprint,
                                     uint64_t sentBytes,
                                     uint64_t expectedBytes);

}  // namespace chorus
