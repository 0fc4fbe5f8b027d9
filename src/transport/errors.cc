// The errors every transport raises the same way: a peer that vanished, a deadline that passed.
// Declared in transport.h.
#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/stall_watch.h"
#include "transport/transport.h"

namespace chorus::transport {

PeerError makeCrashedPeerError(int selfRank, int peerRank) {
  return PeerError(detail::concat("rank ", selfRank, " (this process): rank ", peerRank,
                                  " closed its connection unexpectedly (the process died or was "
                                  "killed)"),
                   peerRank);
}

TimeoutError makeTimeoutError(int selfRank, std::vector<int> peers) {
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
                     "CHORUS_TIMEOUT if ",
                     one ? "it is" : "they are", " only slow)"),
      peers);
}

}  // namespace chorus::transport
