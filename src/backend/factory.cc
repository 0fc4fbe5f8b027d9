#include "backend/factory.h"

#include "backend/algorithmic_backend.h"
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
constexpr const char* kValidNames = "auto, shm, tcp, mpi, mpi_algorithms, void";

// The algorithms over the MPI transport, on a duplicate of `comm`; null in builds without it.
std::unique_ptr<Backend> mpiAlgorithms(MPI_Comm comm) {
#ifdef CHORUS_HAVE_MPI_TRANSPORT
  return std::make_unique<AlgorithmicBackend>(transport::mpi::createMpiTransport(comm),
                                              "mpi_algorithms");
#else
  return nullptr;
#endif
}

std::unique_ptr<Backend> createMpiBackend(const BackendOptions& options) {
  CHORUS_CHECK_ARG(static_cast<int>(options.worldRanks.size()) == options.size, "backend '",
                   options.name, "' needs the world ranks of all ", options.size, " members");
  MPI_Comm comm = mpi::createMpiComm(options.worldRanks, options.scope, options.deadline);
  try {
    auto fallback = mpiAlgorithms(comm);
    if (options.name == "mpi")
      return std::make_unique<mpi::MpiBackend>(comm, std::move(fallback));
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
constexpr const char* kValidNames = "auto, shm, tcp, void";
#endif

bool isMpiName(const std::string& name) { return name == "mpi" || name == "mpi_algorithms"; }

}  // namespace

std::unique_ptr<Backend> createBackend(const BackendOptions& options) {
  const std::string& name = options.name;
  CHORUS_CHECK_ARG(
      name == "auto" || name == "shm" || name == "tcp" || name == "void" || isMpiName(name),
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
  CHORUS_CHECK_ARG(name != "shm" || options.oneNode, "rank ", options.rank,
                   ": backend 'shm' needs every member of the communicator on one node, but this "
                   "communicator spans several nodes; use backend 'tcp' or 'auto'");
  transport::TransportOptions transportOptions;
  transportOptions.rank = options.rank;
  transportOptions.size = options.size;
  transportOptions.store = options.store;
  transportOptions.token = options.token;
  transportOptions.scope = options.scope;
  transportOptions.bindHost = options.bindHost;
  transportOptions.deadline = options.deadline;
  if (name == "tcp" || !options.oneNode)
    return std::make_unique<AlgorithmicBackend>(
        transport::createTransport("tcp", transportOptions));
  // One node: native shared-memory collectives, with chorus's algorithms over the transport for
  // the rest. The group's store keys live apart from the transport's.
  auto group = std::make_unique<shm::ShmGroup>(
      options.rank, options.size, std::make_shared<store::PrefixStore>("native", options.store),
      options.scope, options.deadline);
  auto fallback = std::make_unique<AlgorithmicBackend>(
      transport::createTransport(kShmFallbackTransport, transportOptions));
  return std::make_unique<shm::ShmBackend>(std::move(group), std::move(fallback));
}

}  // namespace chorus::backend
