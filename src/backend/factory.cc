// The backend table and createBackend: see factory.h.
#include "backend/factory.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "backend/algorithmic_backend.h"
#include "backend/hierarchical/hierarchical_backend.h"
#include "backend/mpi/mpi_setup.h"
#include "backend/nccl/nccl_setup.h"
#include "backend/shm/shm_backend.h"
#include "backend/void_backend.h"
#include "core/check.h"

namespace chorus::backend {
namespace {

bool always() { return true; }

// The rules of "auto" (BackendInfo::automatic), in table order: one rank needs no connection; a
// job without a store was started by mpirun; with a store: shm on one node, hierarchical when the
// members span nodes and some node has several, and when each is alone on its node: mpi in a job
// started by mpirun, tcp otherwise.
bool oneRank(const BackendOptions& options) { return options.size == 1; }
bool oneNode(const BackendOptions& options) { return options.store != nullptr && options.oneNode; }
bool someNodeShared(const BackendOptions& options) {
  std::vector<std::string> nodes = options.nodeIds;
  std::sort(nodes.begin(), nodes.end());
  return options.store != nullptr && std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end();
}
bool mpiSuits(const BackendOptions& options) {
  return options.store == nullptr ||
         (options.interNodeTransport == "mpi" && !options.oneNode && !someNodeShared(options));
}
bool withStore(const BackendOptions& options) { return options.store != nullptr; }

// The rows, in the order "auto" tries them.
constexpr BackendInfo kBackends[] = {
    {"void", "one rank: every collective is the identity", always, oneRank, createVoidBackend},
    {"mpi", "native MPI collectives (jobs started by mpirun)", mpi::available, mpiSuits,
     mpi::createMpiBackend},
    {"shm", "shared-memory collectives among the ranks of one node", always, oneNode,
     shm::createShmBackend},
    {"hierarchical", "shm inside each node, tcp (mpi under mpirun) among one leader per node",
     always, someNodeShared, hierarchical::createHierarchicalBackend},
    {"tcp", "chorus's algorithms over TCP sockets, any nodes", always, withStore, createTcpBackend},
    {"mpi_algorithms", "chorus's algorithms over MPI point-to-point", mpi::available, nullptr,
     mpi::createMpiAlgorithmsBackend},
    // Never chosen by "auto" for host tensors; CUDA tensors reach it through the device path.
    {"nccl", "NCCL collectives on CUDA tensors (NVIDIA GPUs)", nccl::available, nullptr,
     nccl::createNcclBackend},
};

// "auto, void, shm, ...": the names this build has.
std::string namesInThisBuild() {
  std::string names = "auto";
  for (const BackendInfo& row : kBackends) {
    if (row.available())
      names += detail::concat(", ", row.name);
  }
  return names;
}

const BackendInfo& automaticRow(const BackendOptions& options) {
  for (const BackendInfo& row : kBackends) {
    if (row.available() && row.automatic != nullptr && row.automatic(options))
      return row;
  }
  throw UnsupportedError(
      detail::concat("backend 'auto' found no backend in this build for this communicator of ",
                     options.size, " ranks (",
                     options.store == nullptr ? "the job has no rendezvous store: start it with "
                                                "chorusrun, or rebuild chorus with "
                                                "-DCHORUS_WITH_MPI=ON to run under mpirun"
                                              : "no rule matched",
                     ")"));
}

}  // namespace

std::unique_ptr<Backend> createBackend(const BackendOptions& options) {
  const auto named = std::find_if(std::begin(kBackends), std::end(kBackends),
                                  [&](const BackendInfo& row) { return row.name == options.name; });
  CHORUS_CHECK_ARG(options.name == "auto" || named != std::end(kBackends), "unknown backend '",
                   options.name, "'; valid backends in this build: ", namesInThisBuild(),
                   " (set by CHORUS_BACKEND)");
  // A communicator of one rank needs no connection, whatever the backend.
  if (options.size == 1)
    return createVoidBackend(options);
  if (options.name == "auto")
    return automaticRow(options).create(options);
  return named->create(options);
}

namespace {
std::atomic<DeviceBackendMaker> deviceBackendMakerForTesting{nullptr};
}  // namespace

void setDeviceBackendMakerForTesting(DeviceBackendMaker maker) {
  deviceBackendMakerForTesting.store(maker);
}

std::unique_ptr<Backend> createDeviceBackend(const BackendOptions& options) {
  if (DeviceBackendMaker maker = deviceBackendMakerForTesting.load())
    return maker(options);
  if (!nccl::available()) {
    throw UnsupportedError(detail::concat(
        "rank ", options.worldRanks.empty() ? options.rank : options.worldRanks[options.rank],
        " (this process): this chorus was built without a GPU backend, so it cannot run "
        "collectives on CUDA tensors; rebuild it with -DCHORUS_WITH_NCCL=ON (needs the CUDA "
        "toolkit and NCCL), or move the tensors to the CPU"));
  }
  BackendOptions named = options;
  named.name = "nccl";
  return nccl::createNcclBackend(named);
}

}  // namespace chorus::backend
