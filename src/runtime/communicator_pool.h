// CommunicatorPool: the communicators of rank_list groups, made once per (backend, normalized
// rank_list) and then served from the cache, so a repeated rank_list costs no new rendezvous.
//
// A rank_list is a list of groups of world ranks. Normalizing completes it into a partition of
// the world: ranks in no group become groups of one (in ascending order), so `[[0, 1, 2]]` on 4
// ranks is `[[0, 1, 2], [3]]`. A group holding every rank in order is the world itself.
//
// Contract: get() is collective over the world the first time a key is seen (every world rank must
// call it with the same rank_list and backend, in the same order); later calls return the cached
// communicator without communicating. Not thread-safe: DistContext serializes calls.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "chorus/communicator.h"

namespace chorus::detail {

class CommunicatorPool {
 public:
  explicit CommunicatorPool(std::shared_ptr<Communicator> world);

  // The caller's group of `rankList`, whose collectives run on `backend`.
  std::shared_ptr<Communicator> get(const RankList& rankList, const std::string& backend);
  // The whole world in rank order on `backend`: the world communicator itself when it uses that
  // backend (no allocation), else a cached copy on it (collective the first time, as get()).
  std::shared_ptr<Communicator> world(const std::string& backend);
  // Drops the cached groups of `rankList` on every backend (not the world): the next get() of it
  // makes new ones, collectively. Local; every rank must do it alike, as the next get() is
  // collective. Returns how many it dropped.
  int forget(const RankList& rankList);
  void clear();
  // Aborts the world and every cached group (Communicator::abort(reason)). Never throws.
  void abortAll(const std::string& reason, int failedRank = -1) noexcept;

  // Duplicates ("Each rank can only appear on rank_list once"), ranks outside the world and empty
  // groups are InvalidArgumentError.
  static RankList normalize(const RankList& rankList, int worldSize);
  // "[[0, 1], [2]]".
  static std::string format(const RankList& groups);

 private:
  // Every rank must ask for the same (normalized) groups: an allgather of their hash on the
  // world, before the split. A difference is a MismatchError (field "rank_list") on every rank,
  // naming the ranks whose list differs from this rank's and showing both lists.
  void checkSameOnEveryRank(const RankList& groups);

  std::shared_ptr<Communicator> world_;
  std::map<std::pair<std::string, RankList>, std::shared_ptr<Communicator>> groups_;
};

}  // namespace chorus::detail
