// Communicator::split: MPI_Comm_split semantics. Every rank contributes (color, key) through an
// allgather on this communicator (so the split is ordered with the other operations and checked by
// the fingerprint); ranks with equal color form a group ordered by (key, rank). Groups are numbered
// by ascending color. The new communicators connect through the store under a scope unique to this
// split and color.
#include <algorithm>
#include <set>

#include "chorus/communicator.h"
#include "core/check.h"
#include "runtime/communicator_access.h"
#include "runtime/communicator_factory.h"
#include "runtime/communicator_ops.h"
#include "runtime/communicator_state.h"

namespace chorus {

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  return detail::splitCommunicator(*this, color, key, state_->resources().backendName);
}

namespace detail {

std::shared_ptr<Communicator> splitCommunicator(Communicator& parent,
                                                int color,
                                                int key,
                                                const std::string& backend) {
  auto& state = CommunicatorAccess::state(parent);
  const int p = parent.size();
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * p);
  auto fingerprint = makeFingerprint(Collective::kSplit, 2, DataType::kInt64, std::nullopt, -1);
  state
      .submit(fingerprint,
              [&state, &mine, &all](const backend::CallContext& call) {
                state.backend().allgather(call, {mine.data(), all.data(), 2 * sizeof(int64_t)});
              })
      ->wait();
  const uint64_t splitId = state.nextSplitId();
  if (color < 0)
    return nullptr;

  std::set<int64_t> colors;
  std::vector<std::pair<int64_t, int>> keyed;  // (key, rank) of my color
  for (int r = 0; r < p; ++r) {
    if (all[2 * r] >= 0)
      colors.insert(all[2 * r]);
    if (all[2 * r] == color)
      keyed.emplace_back(all[2 * r + 1], r);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> members;
  for (const auto& [memberKey, memberRank] : keyed) members.push_back(memberRank);
  const int groupId = static_cast<int>(std::distance(colors.begin(), colors.find(color)));
  const std::string scope = concat(state.resources().scope, "/split", splitId, "/color", color);
  return createGroupCommunicator(state, members, groupId, static_cast<int>(colors.size()), scope,
                                 backend);
}

}  // namespace detail
}  // namespace chorus
