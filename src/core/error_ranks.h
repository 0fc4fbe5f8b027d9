// An error raised among a subset of ranks, told in the caller's numbering.
//
// A layer that runs a step among some of its ranks (a sub-communicator within the world) gets
// errors that number ranks within that step. (The hierarchical backend's node and leaders steps
// do not use it yet: abort notices cross its steps already in the communicator's numbering, and
// the census names communicator ranks inside a step, so its errors mix both; docs/errors.md.)
// withRanksMapped() gives the caller the same error with those numbers translated:
// PeerError::peerRank(), TimeoutError::missingRanks() and MismatchError::ranks() through `map`,
// and `prefix` (which should say what the numbers in the quoted message stand for) in front of
// the message. Any other chorus error keeps its type and gets the prefix; anything else is
// returned unchanged.
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace chorus::detail {

// `map[i]` is the caller's number for rank i of the step; numbers outside the map (-1: no rank)
// stay as they are. Never throws (returns `error` unchanged if it cannot translate it).
std::exception_ptr withRanksMapped(std::exception_ptr error,
                                   const std::vector<int>& map,
                                   const std::string& prefix) noexcept;

}  // namespace chorus::detail
