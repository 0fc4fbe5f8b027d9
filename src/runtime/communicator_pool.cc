#include "runtime/communicator_pool.h"

#include <algorithm>

#include "core/check.h"
#include "runtime/communicator_factory.h"

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
  const bool isWorld = groups.size() == 1 && std::is_sorted(groups[0].begin(), groups[0].end());
  if (isWorld && backend == world_->state().resources().backendName)
    return world_;
  auto key = std::make_pair(backend, groups);
  if (auto cached = groups_.find(key); cached != groups_.end())
    return cached->second;
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

std::shared_ptr<Communicator> CommunicatorPool::world(const std::string& backend) {
  if (backend == world_->state().resources().backendName)
    return world_;
  RankList everyone(1);
  for (int rank = 0; rank < world_->size(); ++rank) everyone[0].push_back(rank);
  return get(everyone, backend);
}

void CommunicatorPool::abortAll(const std::string& reason) noexcept {
  if (world_)
    world_->abort(reason);
  for (auto& [key, group] : groups_) {
    if (group)
      group->abort(reason);
  }
}

void CommunicatorPool::clear() {
  groups_.clear();
  world_.reset();
}

}  // namespace chorus::detail
