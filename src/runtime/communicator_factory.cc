#include "runtime/communicator_factory.h"

#include <algorithm>

#include "backend/factory.h"
#include "chorus/error.h"
#include "core/check.h"
#include "store/prefix_store.h"
#include "store/rank_failure.h"

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

// Note [A rank that never joins]
// The world's communicator is made at the first operation, and its first step, the exchange of
// node ids, is where the ranks first wait for each other. A rank that failed before it (an
// exception in the program's setup, a crash) used to leave the others waiting in the store until
// CHORUS_TIMEOUT, and then they raised the store's own error, naming a key, not the rank. Now the
// wait goes in slices of kJoinSlice; between them each rank looks for the launcher's record of a
// failed rank (store/rank_failure.h: chorusrun writes it when it reaps a rank that exited non-zero
// or was killed), or of the rank it waits for having exited with code 0 (recordEarlyExit), each a
// PeerError naming it at once; and at the deadline the TimeoutError names the ranks that never
// published theirs, with missingRanks (under mpirun, where nobody writes the records, that is
// how a rank that never joins is reported).
constexpr std::chrono::milliseconds kJoinSlice{250};

std::string nodeKey(int rank) { return "node/" + std::to_string(rank); }

[[noreturn]] void throwNeverJoined(store::Store& scoped, int rank, int size, int from) {
  std::vector<int> missing;
  for (int r = from; r < size; ++r) {
    if (!scoped.check({nodeKey(r)}))
      missing.push_back(r);
  }
  std::string names;
  for (int r : missing) names += concat(names.empty() ? "" : ", ", r);
  const bool one = missing.size() == 1;
  throw TimeoutError(concat("rank ", rank, " (this process): timed out setting up the world's ",
                            "communicator, waiting for ", one ? "rank " : "ranks ", names,
                            ", which never joined; ", one ? "it" : "they",
                            " may have failed or exited before the first operation, or be stuck "
                            "(raise the timeout (CHORUS_TIMEOUT) if ",
                            one ? "it is" : "they are", " only slow)"),
                     missing);
}

// Every rank publishes its node id; returns all of them in rank order (Note [A rank that never
// joins]). `job` is the job's store, `scoped` the communicator's part of it.
std::vector<std::string> exchangeNodeIds(store::Store& job,
                                         store::Store& scoped,
                                         int rank,
                                         int size,
                                         const std::string& nodeId,
                                         Deadline deadline) {
  scoped.set(nodeKey(rank), store::toBytes(nodeId));
  std::vector<std::string> nodeIds(size);
  for (int r = 0; r < size; ++r) {
    while (true) {
      try {
        const Deadline slice = Deadline::earliest(deadline, Deadline::after(kJoinSlice));
        nodeIds[r] = store::toString(scoped.get(nodeKey(r), slice));
        break;
      } catch (const TimeoutError&) {
        if (auto failure = store::recordedRankFailure(job, Deadline(Clock::now()))) {
          throw PeerError(concat("rank ", rank, " (this process): ", failure->what,
                                 " before the world's communicator was set up"),
                          failure->rank);
        }
        if (auto exit = store::recordedEarlyExit(job, r)) {
          throw PeerError(concat("rank ", rank, " (this process): ", *exit,
                                 " without joining the world's communicator, which this rank's "
                                 "first operation was setting up"),
                          r);
        }
        if (deadline.expired())
          throwNeverJoined(scoped, rank, size, r);
      }
    }
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
    info.nodeIds = exchangeNodeIds(*options.store, scoped, options.rank, options.size,
                                   options.nodeId, Deadline::after(options.timeout));
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
