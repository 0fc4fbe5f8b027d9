// Communicator::split: MPI_Comm_split semantics. Every rank contributes (color, key) through an
// allgather on this communicator (so the split is ordered with the other operations and checked by
// the fingerprint); ranks with equal color form a group ordered by (key, rank). Groups are numbered
// by ascending color. The new communicators connect through the store under a scope unique to this
// split and color; when the parent already runs CUDA collectives, its NCCL communicator is split
// too (ncclCommSplit, on every rank of the parent) and the group's collectives on CUDA tensors use
// that piece instead of a new rendezvous.
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

// The members meet in the store under a scope named by the tag, the member list and how many times
// this rank has made that (tag, members) group before: every member counts the same calls, so the
// scope is equal on all of them and new for every call.
std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& members,
                                                     const std::string& tag) {
  const int me = rank();
  std::set<int> seen;
  for (int member : members) {
    CHORUS_CHECK_ARG(member >= 0 && member < size(), "rank ", me, " (this process): subgroup '",
                     tag, "': member ", member, " is not a rank of this communicator (size ",
                     size(), ")");
    CHORUS_CHECK_ARG(seen.insert(member).second, "rank ", me, " (this process): subgroup '", tag,
                     "': rank ", member, " is listed twice");
  }
  CHORUS_CHECK_ARG(seen.count(me) == 1, "rank ", me, " (this process): subgroup '", tag,
                   "': this rank is not one of its members");
  std::string name = detail::concat(tag, "/");
  for (int member : members) name += detail::concat(member, ",");
  const uint64_t count = state_->nextSubgroupCount(name);
  const std::string scope =
      detail::concat(state_->resources().scope, "/subgroup/", name, "#", count);
  return detail::createGroupCommunicator(*state_, members, 0, 1, scope,
                                         state_->resources().backendName);
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
  const std::string scope = concat(state.resources().scope, "/split", splitId, "/color", color);
  // Every rank of the parent takes part in splitting its NCCL communicator, if it has one.
  const int position = static_cast<int>(
      std::find(members.begin(), members.end(), state.info().rank) - members.begin());
  std::unique_ptr<backend::Backend> device = state.splitDevice(color, position, members, scope);
  if (color < 0)
    return nullptr;
  const int groupId = static_cast<int>(std::distance(colors.begin(), colors.find(color)));
  auto group = createGroupCommunicator(state, members, groupId, static_cast<int>(colors.size()),
                                       scope, backend);
  if (device)
    CommunicatorAccess::state(*group).adoptDeviceBackend(std::move(device));
  return group;
}

}  // namespace detail
}  // namespace chorus
