#include "backend/factory.h"

#include <algorithm>
#include <numeric>

#include "backend/algorithmic_backend.h"
#include "backend/hierarchical/hierarchical_backend.h"
#include "backend/shm/shm_backend.h"
#include "backend/void_backend.h"
#include "core/check.h"
#include "store/prefix_store.h"
#include "transport/registry.h"
#ifdef CHORUS_WITH_MPI
#include "backend/mpi/mpi_backend.h"
#include "backend/mpi/mpi_comm.h"
#ifdef CHORUS_HAVE_MPI_TRANSPORT
#include "transport/mpi/transport.h"
#endif
#endif

namespace chorus::backend {
namespace {

// What the shm backend runs its non-native collectives over.
constexpr const char* kShmFallbackTransport = "shm";

#ifdef CHORUS_WITH_MPI
constexpr const char* kValidNames = "auto, shm, tcp, hierarchical, mpi, mpi_algorithms, void";

// The algorithms over the MPI transport, on a duplicate of `comm`; null in builds without it.
std::unique_ptr<Backend> mpiAlgorithms(MPI_Comm comm, const detail::RankNames& names) {
#ifdef CHORUS_HAVE_MPI_TRANSPORT
  return std::make_unique<AlgorithmicBackend>(
      transport::mpi::createMpiTransport(comm, Deadline::never(), names), "mpi_algorithms");
#else
  return nullptr;
#endif
}

std::unique_ptr<Backend> createMpiBackend(const BackendOptions& options) {
  CHORUS_CHECK_ARG(static_cast<int>(options.worldRanks.size()) == options.size, "backend '",
                   options.name, "' needs the world ranks of all ", options.size, " members");
  MPI_Comm comm = mpi::createMpiComm(options.worldRanks, options.scope, options.deadline);
  try {
    const detail::RankNames names(options.worldRanks);
    auto fallback = mpiAlgorithms(comm, names);
    if (options.name == "mpi")
      return std::make_unique<mpi::MpiBackend>(comm, std::move(fallback), names, options.deadline);
    if (!fallback) {
      throw UnsupportedError(
          "backend 'mpi_algorithms' needs the MPI transport, which this build lacks; use backend "
          "'mpi'");
    }
    MPI_Comm_free(&comm);
    return fallback;
  } catch (...) {
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
    throw;
  }
}
#else
constexpr const char* kValidNames = "auto, shm, tcp, hierarchical, void";
#endif

bool isMpiName(const std::string& name) { return name == "mpi" || name == "mpi_algorithms"; }

// Native shared-memory collectives among `options`' ranks (one node), with chorus's algorithms
// over the shm transport for the rest. The group's store keys live apart from the transport's.
std::unique_ptr<Backend> createShmBackend(const transport::TransportOptions& options) {
  auto group =
      std::make_unique<shm::ShmGroup>(options.rank, options.size, options.names,
                                      std::make_shared<store::PrefixStore>("native", options.store),
                                      options.scope, options.deadline);
  auto fallback = std::make_unique<AlgorithmicBackend>(
      transport::createTransport(kShmFallbackTransport, options));
  return std::make_unique<shm::ShmBackend>(std::move(group), std::move(fallback));
}

// `options` narrowed to the sub-group of `members` (ranks of `options`), of which this rank is
// member `rank`, with its own store scope and handshake scope named `part`.
transport::TransportOptions subGroup(const transport::TransportOptions& options,
                                     const std::string& part,
                                     int rank,
                                     const std::vector<int>& members) {
  transport::TransportOptions narrowed = options;
  narrowed.rank = rank;
  narrowed.size = static_cast<int>(members.size());
  narrowed.names = options.names.subset(members);
  narrowed.store = std::make_shared<store::PrefixStore>(part, options.store);
  narrowed.scope = options.scope + "/" + part;
  return narrowed;
}

// See hierarchical/hierarchical_backend.h. Every rank makes the flat backend first, then its
// node's, then (leaders) the leaders', so no setup waits on a rank busy with a later one.
std::unique_ptr<Backend> createHierarchicalBackend(const BackendOptions& options,
                                                   const transport::TransportOptions& whole) {
  CHORUS_CHECK_ARG(static_cast<int>(options.nodeIds.size()) == options.size, "rank ",
                   whole.names(options.rank),
                   ": backend 'hierarchical' needs the node of each of the ", options.size,
                   " members, got ", options.nodeIds.size());
  auto layout = hierarchical::nodeLayout(options.nodeIds, options.rank);
  std::vector<int> everyone(options.size);
  std::iota(everyone.begin(), everyone.end(), 0);
  auto flat = std::make_unique<AlgorithmicBackend>(
      transport::createTransport("tcp", subGroup(whole, "flat", options.rank, everyone)));
  std::unique_ptr<Backend> local;
  const int localSize = static_cast<int>(layout.nodeMembers.size());
  if (localSize > 1) {
    local = createShmBackend(subGroup(whole, detail::concat("node", layout.nodeMembers[0]),
                                      layout.localRank, layout.nodeMembers));
  }
  std::unique_ptr<Backend> leaders;
  const int nodes = static_cast<int>(layout.leaders.size());
  if (layout.isLeader() && nodes > 1 && nodes < options.size) {
    leaders = std::make_unique<AlgorithmicBackend>(transport::createTransport(
        "tcp", subGroup(whole, "leaders", layout.nodeIndex, layout.leaders)));
  }
  return std::make_unique<hierarchical::HierarchicalBackend>(
      std::move(layout), whole.names, std::move(local), std::move(leaders), std::move(flat));
}

// What "auto" means for a communicator of several ranks with a store: shm on one node,
// hierarchical when the members span nodes and some node has several, tcp when each is alone.
std::string automaticName(const BackendOptions& options) {
  if (options.oneNode)
    return "shm";
  std::vector<std::string> nodes = options.nodeIds;
  std::sort(nodes.begin(), nodes.end());
  const bool someNodeShared = std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end();
  return someNodeShared ? "hierarchical" : "tcp";
}

}  // namespace

std::unique_ptr<Backend> createBackend(const BackendOptions& options) {
  const std::string& name = options.name;
  CHORUS_CHECK_ARG(name == "auto" || name == "shm" || name == "tcp" || name == "hierarchical" ||
                       name == "void" || isMpiName(name),
                   "unknown backend '", name, "'; valid backends in this build: ", kValidNames,
                   " (set by CHORUS_BACKEND)");
  // A communicator of one rank needs no connection, whatever the backend.
  if (options.size == 1)
    return std::make_unique<VoidBackend>();
  CHORUS_CHECK_ARG(name != "void", "backend 'void' serves only communicators of size 1, not ",
                   options.size, " ranks");
#ifdef CHORUS_WITH_MPI
  // Without a store the job was started by mpirun: "auto" means the native MPI backend.
  if (isMpiName(name) || (name == "auto" && options.store == nullptr)) {
    BackendOptions mpiOptions = options;
    if (name == "auto")
      mpiOptions.name = "mpi";
    return createMpiBackend(mpiOptions);
  }
#else
  if (isMpiName(name)) {
    throw UnsupportedError("backend '" + name +
                           "' is not in this build: rebuild chorus with -DCHORUS_WITH_MPI=ON "
                           "(needs an MPI library, e.g. libopenmpi-dev)");
  }
#endif
  if (options.store == nullptr) {
    throw UnsupportedError(detail::concat(
        "backend '", name,
        "' needs a rendezvous store, which this job does not have (started by "
        "mpirun: use backend 'mpi' or 'mpi_algorithms', or start the job with chorusrun)"));
  }
  const detail::RankNames names(options.worldRanks);  // Note [One rank numbering]
  CHORUS_CHECK_ARG(name != "shm" || options.oneNode, "rank ", names(options.rank),
                   ": backend 'shm' needs every member of the communicator on one node, but this "
                   "communicator spans several nodes; use backend 'auto', 'hierarchical' or 'tcp'");
  transport::TransportOptions transportOptions;
  transportOptions.rank = options.rank;
  transportOptions.size = options.size;
  transportOptions.names = names;
  transportOptions.store = options.store;
  transportOptions.token = options.token;
  transportOptions.scope = options.scope;
  transportOptions.bindHost = options.bindHost;
  transportOptions.deadline = options.deadline;
  const std::string chosen = name == "auto" ? automaticName(options) : name;
  if (chosen == "tcp")
    return std::make_unique<AlgorithmicBackend>(
        transport::createTransport("tcp", transportOptions));
  if (chosen == "hierarchical")
    return createHierarchicalBackend(options, transportOptions);
  return createShmBackend(transportOptions);
}

}  // namespace chorus::backend
