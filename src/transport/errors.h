// The errors every transport raises the same way, worded once so that a user reads the same
// message whichever transport (or the shm backend) noticed the problem. Every rank in them is a
// world rank (Note [One rank numbering]); `selfRank` is the rank that raises the error.
#pragma once

#include <cstdint>
#include <exception>
#include <string_view>
#include <vector>

#include "chorus/error.h"
#include "core/collective.h"

namespace chorus::transport {

// `peerRank` went away without a goodbye: killed, crashed, or exited without closing.
PeerError makeCrashedPeerError(int selfRank, int peerRank);

// A deadline passed, naming the peers of unfinished requests (sorted, without repeats) in the
// message and in missingRanks(). `hint`, when given, ends the message.
TimeoutError makeTimeoutError(int selfRank, std::vector<int> peers, std::string_view hint = {});

// A send to (or receive from) `peerRank`, which closed its communicator on purpose, cannot
// complete.
PeerError makeClosedPeerError(int selfRank, int peerRank, bool isSend);
// A receive from any peer cannot complete: every peer closed its communicator (`lastRank` too).
PeerError makeAllPeersClosedError(int selfRank, int lastRank);

// A call on a transport after close().
Error makeTransportClosedError(int selfRank);

// A call on a transport after its test hook crashForTesting().
Error makeCrashedForTestingError(int selfRank);

// The reason abort() records when it is given none.
InternalError makeAbortedError(int selfRank);

// The error `peerRank`'s abort notice carries (encoded by detail::encodeError), of the same type
// as the peer's, its message prefixed with "rank <self> (this process): aborted because rank
// <peer> reported: ".
std::exception_ptr decodeAbortNotice(int selfRank,
                                     int peerRank,
                                     const std::vector<uint8_t>& notice);

// The MismatchError of a message from `peerRank` that does not fit the receive posted for it:
// the fingerprints differ (makeMismatchError), or they agree but the byte counts differ
// (makeByteCountMismatchError). Null when the message fits.
std::exception_ptr findMismatch(int selfRank,
                                int peerRank,
                                const Fingerprint& expected,
                                uint64_t expectedBytes,
                                const Fingerprint& sent,
                                uint64_t sentBytes);

// Throws findMismatch's error, if any.
void checkMatch(int selfRank,
                int peerRank,
                const Fingerprint& expected,
                uint64_t expectedBytes,
                const Fingerprint& sent,
                uint64_t sentBytes);

}  // namespace chorus::transport
