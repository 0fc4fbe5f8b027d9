// The process-wide context: the configuration, the connector (made on first need), the world
// communicator and the pool of group communicators keyed by normalized rank_list.
#include "chorus/dist_context.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "chorus/trace.h"
#include "connector/bind_address.h"
#include "connector/connector.h"
#include "core/check.h"
#include "core/env.h"
#include "core/logging.h"
#include "runtime/communicator_factory.h"
#include "runtime/communicator_pool.h"
#include "runtime/trace_clock.h"
#include "store/external_store.h"
#include "trace/recorder.h"

namespace chorus {

struct DistContext::State {
  std::mutex mutex;
  DistConfig config;
  std::unique_ptr<connector::Connector> connector;
  std::shared_ptr<Communicator> world;
  std::unique_ptr<detail::CommunicatorPool> pool;
  bool shutDown = false;
  int generation = 0;
  // Set by connectThrough(): the world's rendezvous, instead of the environment's.
  std::shared_ptr<KeyValueStore> externalStore;
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

// Under the MPI connector chorus finalizes MPI at exit, with an atexit handler registered when MPI
// was initialized (connector/mpi_environment.h). That handler runs before the static `instance` is
// destroyed, so the context is shut down by a handler registered after it (handlers run in
// reverse order): communicators close while MPI is still up.
void shutDownBeforeMpiFinalize() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit([] {
      std::lock_guard lock(instanceMutex);
      if (instance)
        instance->shutdown();
    });
  });
}

// Note [auto under mpirun]
// MPI bootstraps a job started by mpirun, as in the seeds, but the data still moves over chorus's
// own paths where it can. "auto" picks from the backends the job can run, and a store is what lets
// it pick the store-based ones (factory.cc):
//  - the whole job on one node: rank 0 serves a store on loopback, and "auto" picks shm, as under
//    chorusrun;
//  - across nodes, some holding several ranks, with a bind address named (CHORUS_IFNAME or
//    CHORUS_BIND_ADDR on every rank): rank 0 serves a store there, and "auto" picks hierarchical:
//    shm inside each node, MPI among the nodes' leaders (the fabrics MPI reaches, InfiniBand or
//    UCX, tcp does not);
//  - otherwise (one rank per node, or no bind address) the native mpi backend.
// "mpi" and "mpi_algorithms" stay available by name, and need no store.
bool needsStoreUnderMpi(const std::string& backend, const std::vector<std::string>& nodeIds) {
  if (backend == "shm" || backend == "tcp" || backend == "hierarchical")
    return true;  // startStore explains what they need across nodes
  if (backend != "auto" || nodeIds.size() < 2)
    return false;
  std::vector<std::string> sorted = nodeIds;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() == sorted.back())
    return true;  // one node
  const bool someNodeShared = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
  return someNodeShared && connector::rankBindAddress().has_value();
}

// CHORUS_TRACE=path: every rank starts recording when the world is made, and writes its part at
// exit (Note [Timeline]); chorusrun merges the parts.
void traceFromEnvironment(Communicator& world) {
  trace::setRank(world.worldRank());
  const auto path = env::string("CHORUS_TRACE");
  if (!path || path->empty())
    return;
  if (!detail::startTrace(world, *path))
    return;
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit([] {
      try {
        trace::stop();
      } catch (const std::exception& error) {
        CHORUS_LOG(kError) << error.what();
      }
    });
  });
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

bool DistContext::live() {
  std::lock_guard lock(instanceMutex);
  return instance && !instance->state_->shutDown;
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
    state.connector =
        state.externalStore
            ? connector::connectThrough(std::make_shared<store::ExternalStore>(state.externalStore),
                                        state.config.rank, state.config.size, state.config.timeout)
            : connector::connectFromEnvironment(state.config.timeout);
    if (state.connector->kind() == "mpi") {
      shutDownBeforeMpiFinalize();
      // The store-based backends need a store, which mpirun does not provide (Note [auto under
      // mpirun]).
      if (needsStoreUnderMpi(state.config.backend, state.connector->nodeIds()))
        state.connector->startStore(Deadline::after(state.config.timeout));
      // The connector's placement is authoritative (MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED).
      state.config.rank = state.connector->rank();
      state.config.size = state.connector->size();
      state.config.localRank = state.connector->localRank();
      state.config.localSize = state.connector->localSize();
      state.config.nodeRank = state.connector->nodeRank();
      if (!env::string("CHORUS_DEVICE"))
        state.config.device = "cuda:" + std::to_string(state.config.localRank);
    }
    detail::WorldOptions options;
    options.rank = state.connector->rank();
    options.size = state.connector->size();
    options.nodeId = state.connector->nodeId();
    options.nodeIds = state.connector->nodeIds();
    options.store = state.connector->store();
    options.token = state.connector->token();
    options.backend = state.config.backend;
    options.bindHost = state.connector->hostAddress();
    if (state.connector->kind() == "mpi")
      options.interNodeTransport = "mpi";  // Note [auto under mpirun]
    options.timeout = state.config.timeout;
    options.scope = "world" + std::to_string(state.generation);
    state.world = detail::createWorldCommunicator(options);
    state.pool = std::make_unique<detail::CommunicatorPool>(state.world);
    traceFromEnvironment(*state.world);
  }
  if (rankList.empty())
    return state.pool->world(state.config.backend);  // the default may have changed since
  return state.pool->get(rankList, state.config.backend);
}

bool DistContext::startTrace(const std::string& path) {
  std::shared_ptr<Communicator> world = communicator();
  return detail::startTrace(*world, path);
}

void DistContext::connectThrough(std::shared_ptr<KeyValueStore> store, int rank, int size) {
  std::lock_guard lock(state_->mutex);
  auto& state = *state_;
  CHORUS_CHECK_ARG(!state.shutDown, "the chorus context was shut down");
  CHORUS_CHECK_ARG(store != nullptr, "connectThrough: the store is null");
  if (state.world) {
    CHORUS_CHECK_ARG(state.world->rank() == rank && state.world->size() == size,
                     "connectThrough: chorus's world is already connected as rank ",
                     state.world->rank(), " of ", state.world->size(), ", not ", rank, " of ",
                     size);
    return;
  }
  CHORUS_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "connectThrough: rank ", rank,
                   " is not a rank of a job of size ", size);
  state.externalStore = std::move(store);
  state.config.rank = rank;
  state.config.size = size;
  log::setLogRank(rank);
}

void DistContext::forgetCommunicator(const RankList& rankList) {
  std::lock_guard lock(state_->mutex);
  CHORUS_CHECK_ARG(!rankList.empty(), "forgetCommunicator: the world cannot be forgotten");
  if (state_->pool)
    state_->pool->forget(rankList);
}

void DistContext::abort(const std::string& reason, int failedRank) noexcept {
  std::lock_guard lock(state_->mutex);
  if (state_->pool)
    state_->pool->abortAll(reason, failedRank);
}

void DistContext::shutdown() {
  std::lock_guard lock(state_->mutex);
  state_->shutDown = true;
  if (state_->pool)
    state_->pool->clear();
  state_->pool.reset();
  state_->world.reset();
  state_->connector.reset();
}

}  // namespace chorus
