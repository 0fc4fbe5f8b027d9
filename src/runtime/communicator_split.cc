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
