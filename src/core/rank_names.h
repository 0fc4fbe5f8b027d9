// RankNames: the number by which a communicator's member is named in errors and logs.
//
// Note [One rank numbering]
// A user reads a failure by process: chorusrun labels each process's output with its world rank,
// and a rank_list's roots and peers are world ranks. But each layer numbers the ranks it serves
// from 0: a rank_list group, the hierarchical backend's node and leaders steps, the transports
// under them. A failure also crosses those numberings: an abort notice carries an error from one
// communicator into every other communicator of the failing process (a group's, a step's), and
// the stall census of a hierarchical collective names ranks outside the step that waits. An error
// numbered by the layer that raised it would then be read in the wrong numbering somewhere.
//
// So every rank number that chorus shows, in a message and in PeerError::peerRank(),
// TimeoutError::missingRanks() and MismatchError::ranks(), is a world rank, from the layer that
// raises it on: each transport, backend and census is given the world ranks of its members and
// names them by those. Member indices stay the working numbers inside (arrays, peers, roots).
#pragma once

#include <utility>
#include <vector>

namespace chorus::detail {

class RankNames {
 public:
  // Members named by their own index (the world communicator, and tests).
  RankNames() = default;
  // `worldRanks[i]` is member i's world rank; empty means members are named by their index.
  explicit RankNames(std::vector<int> worldRanks) : worldRanks_(std::move(worldRanks)) {}

  // Member `member`'s world rank; a number that is not a member's index (-1: no rank) is returned
  // as it is.
  int operator()(int member) const {
    return member >= 0 && member < static_cast<int>(worldRanks_.size()) ? worldRanks_[member]
                                                                        : member;
  }
  std::vector<int> operator()(const std::vector<int>& members) const {
    std::vector<int> names;
    names.reserve(members.size());
    for (int member : members) names.push_back((*this)(member));
    return names;
  }
  // The names of a subset: member i of the subset is member `members[i]` here.
  RankNames subset(const std::vector<int>& members) const { return RankNames((*this)(members)); }

 private:
  std::vector<int> worldRanks_;
};

}  // namespace chorus::detail
