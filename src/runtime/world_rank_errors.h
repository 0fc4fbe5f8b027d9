// The errors of a sub-communicator in world ranks.
//
// A sub-communicator (a rank_list group, split()) numbers its members 0..n-1, and every layer
// below the runtime names ranks that way. A user reads a failure by process: chorusrun labels a
// process's output with its world rank, and a rank_list's roots and peers are world ranks. So a
// failing operation of a sub-communicator raises its error with the ranks it names translated:
// PeerError::peerRank(), TimeoutError::missingRanks() and MismatchError::ranks() are world ranks,
// and the message keeps the group's numbering behind a prefix that gives the map:
//   world rank 5 (this process), in the group of world ranks [2, 5, 7] (numbered 0, 1, 2 below):
//   rank 1 (this process): rank 2 closed its connection unexpectedly (...)
// The world communicator's errors (members in world order) pass unchanged.
#pragma once

#include <exception>
#include <vector>

namespace chorus::detail {

// `error`, in world ranks: `worldRanks[i]` is member i's world rank, `rank` this process's
// member index. Never throws (an error it cannot translate is returned as it is).
std::exception_ptr inWorldRanks(std::exception_ptr error,
                                const std::vector<int>& worldRanks,
                                int rank) noexcept;

}  // namespace chorus::detail
