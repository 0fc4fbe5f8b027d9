// Fingerprint comparison and the MismatchError a receiver raises. See Note [Collective fingerprint]
// in collective.h.
#include "core/collective.h"

#include <cstdio>
#include <string>

#include "core/check.h"

namespace chorus {

std::string_view toString(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kAllToAll:
      return "all_to_all";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kPointToPoint:
      return "send/recv";
    case Collective::kSplit:
      return "group setup (split or rank_list)";
    case Collective::kAllToAllV:
      return "all_to_all_v";
    case Collective::kAllgatherV:
      return "allgather_v";
  }
  return "unknown collective";
}

namespace {

// Names for raw header bytes, which may come from a peer built differently: never trust the range.
std::string reduceOpName(uint8_t op) {
  if (op == Fingerprint::kNoReduceOp)
    return "none";
  if (op >= kNumReduceOps)
    return detail::concat("reduce op ", int{op});
  return std::string(toString(static_cast<ReduceOp>(op)));
}

std::string dataTypeName(uint8_t dtype) {
  if (dtype == Fingerprint::kNoDataType)
    return "none";
  if (dtype >= kNumDataTypes)
    return detail::concat("dtype ", int{dtype});
  return std::string(toString(static_cast<DataType>(dtype)));
}

std::string collectiveName(Collective collective) {
  if (static_cast<uint8_t>(collective) > static_cast<uint8_t>(Collective::kAllgatherV)) {
    return detail::concat("collective ", int{static_cast<uint8_t>(collective)});
  }
  return std::string(toString(collective));
}

// "allreduce #7", or "send/recv" for point-to-point (which has no sequence number).
std::string shortName(const Fingerprint& fingerprint) {
  if (fingerprint.collective == Collective::kPointToPoint && fingerprint.sequence == 0) {
    return collectiveName(fingerprint.collective);
  }
  return detail::concat(collectiveName(fingerprint.collective), " #", fingerprint.sequence);
}

}  // namespace

std::string_view Fingerprint::firstDifference(const Fingerprint& other) const {
  if (collective != other.collective)
    return "collective";
  if (sequence != other.sequence)
    return "sequence";
  if (reduceOp != other.reduceOp)
    return "reduce_op";
  if (dataType != other.dataType)
    return "dtype";
  if (count != other.count)
    return "count";
  if (root != other.root)
    return "root";
  if (shape != other.shape)
    return "shape";
  if (algorithm != other.algorithm)
    return "algorithm";
  return {};
}

std::string Fingerprint::fieldValue(std::string_view field) const {
  if (field == "collective")
    return collectiveName(collective);
  if (field == "sequence")
    return std::to_string(sequence);
  if (field == "reduce_op")
    return reduceOpName(reduceOp);
  if (field == "dtype")
    return dataTypeName(dataType);
  if (field == "count")
    return std::to_string(count);
  if (field == "root")
    return root < 0 ? std::string("none") : std::to_string(root);
  if (field == "shape") {
    char hex[19];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(shape));
    return detail::concat("signature ", hex);
  }
  if (field == "algorithm") {
    return detail::concat("algorithm row ", int{algorithm},
                          " (is CHORUS_<COLLECTIVE>_ALGO set differently on some ranks?)");
  }
  CHORUS_CHECK_ARG(false, "unknown fingerprint field '", field,
                   "'; expected collective, sequence, reduce_op, dtype, count, root, shape or "
                   "algorithm");
  return {};
}

std::string Fingerprint::describe() const {
  std::string details;
  auto add = [&details](const std::string& part) {
    details += details.empty() ? "" : ", ";
    details += part;
  };
  if (dataType != kNoDataType) {
    add(detail::concat(dataTypeName(dataType), " x ", count));
  } else if (count != 0) {
    add(detail::concat(count, " bytes"));
  }
  if (reduceOp != kNoReduceOp)
    add(reduceOpName(reduceOp));
  if (root >= 0)
    add(detail::concat("root ", root));
  std::string text = shortName(*this);
  if (!details.empty())
    text += " (" + details + ")";
  return text;
}

MismatchError makeMismatchError(int selfRank,
                                int peerRank,
                                const Fingerprint& self,
                                const Fingerprint& theirs) {
  std::string field(self.firstDifference(theirs));
  CHORUS_ASSERT(!field.empty());
  if ((self.collective == Collective::kSplit) != (theirs.collective == Collective::kSplit)) {
    // One rank sets up a group the other did not ask for: the cause is the group, not the call.
    const bool mine = self.collective == Collective::kSplit;
    return MismatchError(
        detail::concat("rank ", selfRank, " (this process): ", self.describe(),
                       " does not match rank ", peerRank, "'s call, ", theirs.describe(), ": ",
                       mine ? "this rank" : detail::concat("rank ", peerRank),
                       " is setting up a group (a rank_list or split) that ",
                       mine ? detail::concat("rank ", peerRank) : "this rank",
                       " did not ask for. Every rank must pass the same rank_list (and call split "
                       "at the same point)."),
        "rank_list", {selfRank, peerRank});
  }
  std::string message = detail::concat(
      "rank ", selfRank, " (this process): ", self.describe(), " does not match rank ", peerRank,
      "'s call, ", theirs.describe(), ": ", field, " is ", self.fieldValue(field), " here but ",
      theirs.fieldValue(field), " on rank ", peerRank,
      field == "shape" ? " (the element counts agree, but the tensors' shapes or the axes differ)"
                       : "",
      self.collective == Collective::kPointToPoint && theirs.collective == Collective::kPointToPoint
          ? ". A send and the recv that matches it (same peers and tag, in order) must agree on "
            "dtype and element count: chorus neither truncates a message nor fills part of a "
            "buffer, as MPI does. Receive into a buffer of the message's size, or send the "
            "count first (send_object and recv_object do)."
          : ". Every rank must call the same collectives in the same order with the same "
            "arguments.");
  return MismatchError(message, field, {selfRank, peerRank});
}

MismatchError makeByteCountMismatchError(int selfRank,
                                         int peerRank,
                                         const Fingerprint& self,
                                         uint64_t expectedBytes,
                                         uint64_t sentBytes) {
  std::string message = detail::concat(
      "rank ", selfRank, " (this process): ", self.describe(), " expected a message of ",
      expectedBytes, " bytes from rank ", peerRank, " but rank ", peerRank, " sent ", sentBytes,
      " bytes. Every rank must call the same collectives in the same order with the same "
      "arguments, and a receive must be posted with the size of the matching send.");
  return MismatchError(message, "bytes", {selfRank, peerRank});
}

MismatchError makeSplitMismatchError(int sender,
                                     int receiver,
                                     const Fingerprint& fingerprint,
                                     uint64_t sentBytes,
                                     uint64_t expectedBytes) {
  std::string message =
      detail::concat(shortName(fingerprint), ": rank ", sender, " sends ", sentBytes,
                     " bytes to rank ", receiver, ", which expects ", expectedBytes,
                     " bytes from it. Each rank's split for a peer must equal "
                     "that peer's split for it.");
  return MismatchError(message, "bytes", {sender, receiver});
}

}  // namespace chorus
