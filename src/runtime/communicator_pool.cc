#include "runtime/communicator_pool.h"

#include <algorithm>
#include <functional>

#include "core/check.h"
#include "runtime/communicator_access.h"
#include "runtime/communicator_factory.h"
#include "runtime/communicator_ops.h"
#include "runtime/communicator_state.h"
#include "store/store_util.h"

namespace chorus::detail {

CommunicatorPool::CommunicatorPool(std::shared_ptr<Communicator> world)
    : world_(std::move(world)) {}

RankList CommunicatorPool::normalize(const RankList& rankList, int worldSize) {
  RankList groups;
  std::vector<bool> seen(worldSize, false);
  for (const auto& group : rankList) {
    CHORUS_CHECK_ARG(!group.empty(), "rank_list contains an empty group");
    for (int r : group) {
      CHORUS_CHECK_ARG(r >= 0 && r < worldSize, "rank_list names rank ", r,
                       ", which is not a rank of this job of size ", worldSize);
      CHORUS_CHECK_ARG(!seen[r], "Each rank can only appear on rank_list once (rank ", r,
                       " appears twice)");
      seen[r] = true;
    }
    groups.push_back(group);
  }
  for (int r = 0; r < worldSize; ++r) {
    if (!seen[r])
      groups.push_back({r});
  }
  return groups;
}

std::shared_ptr<Communicator> CommunicatorPool::get(const RankList& rankList,
                                                    const std::string& backend) {
  RankList groups = normalize(rankList, world_->size());
  // The world in order is the world communicator, as for an empty rank_list (Python passes it as
  // one), so it is not checked: a rank that names it explicitly agrees with one that passes none.
  const bool isWorld = groups.size() == 1 && std::is_sorted(groups[0].begin(), groups[0].end());
  if (isWorld && backend == CommunicatorAccess::state(*world_).resources().backendName)
    return world_;
  auto key = std::make_pair(backend, groups);
  if (auto cached = groups_.find(key); cached != groups_.end())
    return cached->second;
  checkSameOnEveryRank(groups);  // once per distinct rank_list: the result is cached
  // My group's index is the split color, my position in it the key: group order is list order.
  const int me = world_->rank();
  int color = 0;
  int position = 0;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    auto found = std::find(groups[g].begin(), groups[g].end(), me);
    if (found != groups[g].end()) {
      color = g;
      position = static_cast<int>(found - groups[g].begin());
    }
  }
  auto group = splitCommunicator(*world_, color, position, backend);
  groups_.emplace(std::move(key), group);
  return group;
}

std::string CommunicatorPool::format(const RankList& groups) {
  std::string text = "[";
  for (size_t g = 0; g < groups.size(); ++g) {
    text += g == 0 ? "[" : ", [";
    for (size_t i = 0; i < groups[g].size(); ++i) text += concat(i == 0 ? "" : ", ", groups[g][i]);
    text += "]";
  }
  return text + "]";
}

void CommunicatorPool::checkSameOnEveryRank(const RankList& groups) {
  const std::string mine = format(groups);
  const int64_t hash = static_cast<int64_t>(std::hash<std::string>{}(mine));
  const int size = world_->size();
  std::vector<int64_t> all(size);
  auto& state = CommunicatorAccess::state(*world_);
  auto fingerprint = makeFingerprint(Collective::kSplit, 1, DataType::kInt64, std::nullopt, -1);
  state
      .submit(fingerprint,
              [&state, &hash, &all](const backend::CallContext& call) {
                state.backend().allgather(call, {&hash, all.data(), sizeof(int64_t)});
              })
      ->wait();
  std::vector<int> differing;
  for (int rank = 0; rank < size; ++rank) {
    if (all[rank] != hash)
      differing.push_back(rank);
  }
  if (differing.empty())
    return;
  // Everyone saw the difference. Show one differing rank's list, exchanged through the store.
  const int me = world_->rank();
  std::string theirs = "a different one";
  if (auto store = state.resources().store) {
    const std::string prefix =
        concat("chorus/rank_list/", state.resources().scope, "/", state.nextSplitId(), "/");
    try {
      store->set(concat(prefix, me), store::toBytes(mine));
      theirs = store::toString(
          store->get(concat(prefix, differing.front()), Deadline::after(std::chrono::seconds(5))));
    } catch (const Error&) {
      // The list stays unnamed; the error below still names the ranks.
    }
  }
  std::string names;
  for (int rank : differing) names += concat(names.empty() ? "" : ", ", rank);
  differing.insert(differing.begin(), me);
  throw MismatchError(
      concat("rank ", me, " (this process): rank_list differs between ranks: it is ", mine,
             " here but ", theirs, " on rank ", differing[1],
             differing.size() > 2 ? concat(" (ranks ", names, " differ from this rank)") : "",
             ". Every rank must pass the same rank_list (ranks outside every group are added as "
             "groups of one)."),
      "rank_list", differing);
}

std::shared_ptr<Communicator> CommunicatorPool::world(const std::string& backend) {
  if (backend == CommunicatorAccess::state(*world_).resources().backendName)
    return world_;
  RankList everyone(1);
  for (int rank = 0; rank < world_->size(); ++rank) everyone[0].push_back(rank);
  return get(everyone, backend);
}

void CommunicatorPool::abortAll(const std::string& reason, int failedRank) noexcept {
  if (world_)
    world_->abort(reason, failedRank);
  for (auto& [key, group] : groups_) {
    if (group)
      group->abort(reason, failedRank);
  }
}

int CommunicatorPool::forget(const RankList& rankList) {
  const RankList groups = normalize(rankList, world_->size());
  return static_cast<int>(
      std::erase_if(groups_, [&](const auto& entry) { return entry.first.second == groups; }));
}

void CommunicatorPool::clear() {
  groups_.clear();
  world_.reset();
}

}  // namespace chorus::detail
