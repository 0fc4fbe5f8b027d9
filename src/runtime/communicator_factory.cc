#include "runtime/communicator_factory.h"

#include <algorithm>

#include "backend/factory.h"
#include "core/check.h"
#include "store/prefix_store.h"

namespace chorus::detail {

std::pair<int, int> localPlacement(const std::vector<std::string>& nodeIds, int rank) {
  int localRank = 0;
  int localSize = 0;
  for (int i = 0; i < static_cast<int>(nodeIds.size()); ++i) {
    if (nodeIds[i] != nodeIds[rank])
      continue;
    if (i < rank)
      ++localRank;
    ++localSize;
  }
  return {localRank, localSize};
}

namespace {

std::shared_ptr<Communicator> assemble(CommunicatorInfo info,
                                       CommunicatorResources resources,
                                       std::chrono::milliseconds timeout) {
  const backend::BackendOptions options = backendOptionsOf(info, resources, timeout, "backend");
  auto backend = backend::createBackend(options);
  auto state = std::make_shared<CommunicatorState>(std::move(info), std::move(resources),
                                                   std::move(backend), timeout);
  return std::make_shared<Communicator>(std::move(state));
}

// Every rank publishes its node id; returns all of them in rank order.
std::vector<std::string> exchangeNodeIds(
    store::Store& store, int rank, int size, const std::string& nodeId, Deadline deadline) {
  store.set("node/" + std::to_string(rank), store::toBytes(nodeId));
  std::vector<std::string> nodeIds(size);
  for (int r = 0; r < size; ++r) {
    nodeIds[r] = store::toString(store.get("node/" + std::to_string(r), deadline));
  }
  return nodeIds;
}

}  // namespace

std::shared_ptr<Communicator> createWorldCommunicator(const WorldOptions& options) {
  CHORUS_CHECK_ARG(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "rank ",
                   options.rank, " is not valid in a world of size ", options.size);
  CHORUS_CHECK_ARG(options.size == 1 || options.store != nullptr ||
                       static_cast<int>(options.nodeIds.size()) == options.size,
                   "a world of ", options.size, " ranks needs a store (or the MPI connector)");
  CommunicatorInfo info;
  info.rank = info.worldRank = options.rank;
  info.size = info.worldSize = options.size;
  info.worldRanks.resize(options.size);
  for (int r = 0; r < options.size; ++r) info.worldRanks[r] = r;
  if (!options.nodeIds.empty()) {
    info.nodeIds = options.nodeIds;
  } else if (options.size > 1) {
    store::PrefixStore scoped("comm/" + options.scope + "/nodes", options.store);
    info.nodeIds = exchangeNodeIds(scoped, options.rank, options.size, options.nodeId,
                                   Deadline::after(options.timeout));
  } else {
    info.nodeIds = {options.nodeId};
  }
  std::tie(info.localRank, info.localSize) = localPlacement(info.nodeIds, info.rank);
  CommunicatorResources resources{options.store,   options.token, options.bindHost,
                                  options.backend, options.scope, options.interNodeTransport};
  return assemble(std::move(info), std::move(resources), options.timeout);
}

std::shared_ptr<Communicator> createGroupCommunicator(CommunicatorState& parent,
                                                      const std::vector<int>& members,
                                                      int groupId,
                                                      int groupSize,
                                                      const std::string& scope,
                                                      const std::string& backend) {
  const auto& parentInfo = parent.info();
  auto position = std::find(members.begin(), members.end(), parentInfo.rank);
  CHORUS_ASSERT(position != members.end());
  CommunicatorInfo info;
  info.rank = static_cast<int>(position - members.begin());
  info.size = static_cast<int>(members.size());
  info.worldRank = parentInfo.worldRank;
  info.worldSize = parentInfo.worldSize;
  info.groupId = groupId;
  info.groupSize = groupSize;
  for (int member : members) {
    info.worldRanks.push_back(parentInfo.worldRanks[member]);
    info.nodeIds.push_back(parentInfo.nodeIds[member]);
  }
  std::tie(info.localRank, info.localSize) = localPlacement(info.nodeIds, info.rank);
  CommunicatorResources resources = parent.resources();
  resources.scope = scope;
  resources.backendName = backend;
  return assemble(std::move(info), std::move(resources), parent.timeout());
}

}  // namespace chorus::detail
