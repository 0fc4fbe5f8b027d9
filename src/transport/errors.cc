// The errors every transport raises the same way. See errors.h.
#include "transport/errors.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/error_codec.h"
#include "core/stall_watch.h"

namespace chorus::transport {

PeerError makeCrashedPeerError(int selfRank, int peerRank) {
  return PeerError(detail::concat("rank ", selfRank, " (this process): rank ", peerRank,
                                  " closed its connection unexpectedly (the process died or was "
                                  "killed)"),
                   peerRank);
}

TimeoutError makeTimeoutError(int selfRank, std::vector<int> peers, std::string_view hint) {
  peers = stall::missingRanks(std::move(peers));
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  std::string names;
  for (int peer : peers) names += detail::concat(names.empty() ? "" : ", ", peer);
  const bool one = peers.size() == 1;
  std::string operation = stall::describeTimeout();
  return TimeoutError(
      detail::concat("rank ", selfRank,
                     " (this process): ", operation.empty() ? "timed out" : operation,
                     " waiting for ", one ? "rank " : "ranks ", names, "; ", one ? "it" : "they",
                     " may have crashed, be stuck, or have called a different collective (raise "
                     "the timeout (CHORUS_TIMEOUT) if ",
                     one ? "it is" : "they are", " only slow)", hint),
      peers);
}

PeerError makeClosedPeerError(int selfRank, int peerRank, bool isSend) {
  return PeerError(detail::concat("rank ", selfRank, " (this process): rank ", peerRank,
                                  " has closed its communicator, so a ",
                                  isSend ? "send to" : "receive from", " it cannot complete"),
                   peerRank);
}

PeerError makeAllPeersClosedError(int selfRank, int lastRank) {
  return PeerError(detail::concat("rank ", selfRank,
                                  " (this process): every other rank has closed its communicator "
                                  "(rank ",
                                  lastRank, " too), so a receive from any rank cannot complete"),
                   lastRank);
}

Error makeTransportClosedError(int selfRank) {
  return Error(detail::concat("rank ", selfRank,
                              " (this process): this transport is closed; create a new "
                              "communicator to keep communicating"));
}

Error makeCrashedForTestingError(int selfRank) {
  return Error(
      detail::concat("rank ", selfRank, " (this process): this transport crashed (test hook)"));
}

InternalError makeAbortedError(int selfRank) {
  return InternalError(detail::concat("rank ", selfRank, " (this process): aborted"));
}

std::exception_ptr decodeAbortNotice(int selfRank,
                                     int peerRank,
                                     const std::vector<uint8_t>& notice) {
  return detail::decodeError(
      notice,
      detail::concat("rank ", selfRank, " (this process): aborted because rank ", peerRank,
                     " reported: "),
      peerRank);
}

std::exception_ptr findMismatch(int selfRank,
                                int peerRank,
                                const Fingerprint& expected,
                                uint64_t expectedBytes,
                                const Fingerprint& sent,
                                uint64_t sentBytes) {
  if (!expected.firstDifference(sent).empty())
    return std::make_exception_ptr(makeMismatchError(selfRank, peerRank, expected, sent));
  if (sentBytes != expectedBytes) {
    return std::make_exception_ptr(
        makeByteCountMismatchError(selfRank, peerRank, expected, expectedBytes, sentBytes));
  }
  return nullptr;
}

void checkMatch(int selfRank,
                int peerRank,
                const Fingerprint& expected,
                uint64_t expectedBytes,
                const Fingerprint& sent,
                uint64_t sentBytes) {
  if (auto mismatch = findMismatch(selfRank, peerRank, expected, expectedBytes, sent, sentBytes))
    std::rethrow_exception(mismatch);
}

}  // namespace chorus::transport
