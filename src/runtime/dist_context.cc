// The process-wide context: the configuration, the connector (made on first need), the world
// communicator and the pool of group communicators keyed by normalized rank_list.
#include "chorus/dist_context.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "connector/connector.h"
#include "core/check.h"
#include "core/logging.h"
#include "runtime/communicator_factory.h"

namespace chorus {

struct DistContext::State {
  std::mutex mutex;
  DistConfig config;
  std::unique_ptr<connector::Connector> connector;
  std::shared_ptr<Communicator> world;
  std::map<RankList, std::shared_ptr<Communicator>> pool;
  bool shutDown = false;
  int generation = 0;
};

namespace {

std::mutex instanceMutex;
std::unique_ptr<DistContext> instance;
// How many contexts this process has made. Every rank makes them in the same order (get() after
// shutdown()), so the count names the world's scope in the store identically on all ranks and a
// new world never meets the addresses an earlier one left there.
int contextsMade = 0;
// Contexts that were shut down stay allocated, so references handed out earlier stay valid.
std::vector<std::unique_ptr<DistContext>> retired;

// Completes a rank_list into a partition of the world: unlisted ranks become groups of one, in
// ascending order. Duplicates and out-of-range ranks are InvalidArgumentError.
RankList normalizeRankList(const RankList& rankList, int worldSize) {
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

}  // namespace

DistContext& DistContext::get() {
  std::lock_guard lock(instanceMutex);
  if (instance && instance->state_->shutDown)
    retired.push_back(std::move(instance));
  if (!instance) {
    instance.reset(new DistContext());
    instance->state_->generation = contextsMade++;
  }
  return *instance;
}

DistContext::DistContext() : state_(std::make_unique<State>()) {
  state_->config = DistConfig::fromEnvironment();
  log::setLogRank(state_->config.rank);
}

DistContext::~DistContext() { shutdown(); }

const DistConfig& DistContext::config() const { return state_->config; }

DistConfig& DistContext::mutableConfig() { return state_->config; }

void DistContext::setDefaultBackend(const std::string& backend) {
  std::lock_guard lock(state_->mutex);
  state_->config.backend = backend;
}

std::shared_ptr<Communicator> DistContext::communicator(const RankList& rankList) {
  std::lock_guard lock(state_->mutex);
  auto& state = *state_;
  CHORUS_CHECK_ARG(!state.shutDown, "the chorus context was shut down");
  if (!state.world) {
    state.connector = connector::connectFromEnvironment(state.config.timeout);
    detail::WorldOptions options;
    options.rank = state.connector->rank();
    options.size = state.connector->size();
    options.nodeId = state.connector->nodeId();
    options.store = state.connector->store();
    options.token = state.connector->token();
    options.backend = state.config.backend;
    options.bindHost = state.connector->hostAddress();
    options.timeout = state.config.timeout;
    options.scope = "world" + std::to_string(state.generation);
    state.world = detail::createWorldCommunicator(options);
  }
  if (rankList.empty())
    return state.world;
  RankList groups = normalizeRankList(rankList, state.world->size());
  // One group holding every rank in order is the world itself.
  if (groups.size() == 1 && std::is_sorted(groups[0].begin(), groups[0].end()))
    return state.world;
  if (auto cached = state.pool.find(groups); cached != state.pool.end())
    return cached->second;
  const int me = state.world->rank();
  int color = 0;
  int key = 0;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    auto found = std::find(groups[g].begin(), groups[g].end(), me);
    if (found != groups[g].end()) {
      color = g;
      key = static_cast<int>(found - groups[g].begin());
    }
  }
  auto group = state.world->split(color, key);
  state.pool.emplace(groups, group);
  return group;
}

void DistContext::shutdown() {
  std::lock_guard lock(state_->mutex);
  state_->shutDown = true;
  state_->pool.clear();
  state_->world.reset();
  state_->connector.reset();
}

}  // namespace chorus
