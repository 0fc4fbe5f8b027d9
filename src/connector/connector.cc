// Choosing the connector from the environment: chorusrun's CHORUS_* variables first, then the
// torchrun-compatible RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, then srun's SLURM_* (unless
// the program already initialized MPI), then mpirun's (MPI builds), else a single rank.
#include "connector/connector.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "connector/bind_address.h"
#include "connector/slurm.h"
#include "connector/store_connector.h"
#ifdef CHORUS_WITH_MPI
#include "connector/mpi_connector.h"
#endif
#include "connector/void_connector.h"
#include "core/check.h"
#include "core/env.h"
#include "core/logging.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace chorus::connector {
namespace {

int requiredInt(const char* name) {
  auto value = env::integer(name);
  CHORUS_CHECK_ARG(value.has_value(), "environment variable ", name,
                   " is not set, but the launcher environment needs it");
  return static_cast<int>(*value);
}

int intOr(const char* name, int fallback) {
  auto value = env::integer(name);
  return value ? static_cast<int>(*value) : fallback;
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0)
    return "localhost";
  return name;
}

// The job token: CHORUS_JOB_TOKEN, else the first line of the file named by CHORUS_JOB_TOKEN_FILE,
// which group and others may not access (as chorusrun's --token-file).
std::optional<std::string> jobToken() {
  if (auto token = env::string("CHORUS_JOB_TOKEN"))
    return token;
  if (auto path = env::string("CHORUS_JOB_TOKEN_FILE")) {
    struct stat info {};
    CHORUS_CHECK_ARG(::stat(path->c_str(), &info) == 0, "cannot read the job token file ", *path,
                     " named by CHORUS_JOB_TOKEN_FILE: ", std::strerror(errno));
    CHORUS_CHECK_ARG((info.st_mode & 077) == 0, "the job token file ", *path,
                     " (CHORUS_JOB_TOKEN_FILE) is accessible to group or others; run chmod 600 ",
                     *path);
    std::ifstream file(*path);
    CHORUS_CHECK_ARG(file.good(), "cannot read the job token file ", *path,
                     " named by CHORUS_JOB_TOKEN_FILE");
    std::string token;
    std::getline(file, token);
    CHORUS_CHECK_ARG(!token.empty(), "the job token file ", *path,
                     " (CHORUS_JOB_TOKEN_FILE) is empty");
    return token;
  }
  return std::nullopt;
}

Placement readPlacement(const char* rankVar,
                        const char* sizeVar,
                        const char* localRankVar,
                        const char* localSizeVar) {
  Placement placement;
  placement.rank = requiredInt(rankVar);
  placement.size = requiredInt(sizeVar);
  CHORUS_CHECK_ARG(placement.size >= 1 && placement.rank >= 0 && placement.rank < placement.size,
                   rankVar, "=", placement.rank, " is not a valid rank for ", sizeVar, "=",
                   placement.size);
  placement.localRank = intOr(localRankVar, placement.rank);
  placement.localSize = intOr(localSizeVar, placement.size);
  placement.nodeRank = intOr("CHORUS_NODE_RANK", -1);
  placement.nodeId =
      placement.nodeRank >= 0 ? "node" + std::to_string(placement.nodeRank) : hostName();
  if (placement.nodeRank < 0)
    placement.nodeRank = 0;
  return placement;
}

std::unique_ptr<Connector> connectChorusrun(std::chrono::milliseconds timeout) {
  Placement placement =
      readPlacement("CHORUS_RANK", "CHORUS_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_SIZE");
  auto address = net::Address::parse(*env::string("CHORUS_STORE"));
  auto token = jobToken();
  CHORUS_CHECK_ARG(token.has_value(),
                   "CHORUS_STORE is set but neither CHORUS_JOB_TOKEN nor CHORUS_JOB_TOKEN_FILE is; "
                   "start the job with chorusrun");
  auto store = std::make_shared<store::TcpStore>(address, *token, Deadline::after(timeout));
  std::string host = rankBindAddress().value_or(store->localAddress());
  return std::make_unique<StoreConnector>(placement, std::move(store), *token, nullptr,
                                          std::move(host));
}

// The store that rank 0 serves under torchrun-style launching. It lives as long as the process, not
// the connector: after DistContext::shutdown() the other ranks reconnect to the same address, and
// a server that was stopped and restarted there would race with them.
std::shared_ptr<store::TcpStoreServer> processStoreServer(const net::Address& address,
                                                          const std::string& token) {
  static std::mutex mutex;
  static std::shared_ptr<store::TcpStoreServer> server;
  std::lock_guard lock(mutex);
  if (!server) {
    std::string bindHost = address.host == "localhost" ? "127.0.0.1" : address.host;
    server = std::make_shared<store::TcpStoreServer>(bindHost, address.port, token);
  }
  return server;
}

// torchrun-style: rank 0 serves the store at MASTER_ADDR:MASTER_PORT. A wildcard MASTER_ADDR
// would bind every interface implicitly and is refused (Note [Bind address]).
std::unique_ptr<Connector> connectTorchrun(std::chrono::milliseconds timeout) {
  Placement placement = readPlacement("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  net::Address address{env::string("MASTER_ADDR").value_or("127.0.0.1"),
                       static_cast<uint16_t>(requiredInt("MASTER_PORT"))};
  CHORUS_CHECK_ARG(!isWildcardAddress(address.host), "rank ", placement.rank,
                   ": MASTER_ADDR=", address.host,
                   " would make rank 0 serve the store on every interface; set MASTER_ADDR to "
                   "rank 0's address on the network the ranks share (127.0.0.1 on one machine)");
  std::string bindHost = rankBindAddress().value_or("");
  auto token = jobToken();
  if (!token) {
    CHORUS_LOG(kWarn) << "no CHORUS_JOB_TOKEN is set: connections are authenticated with a token "
                         "derived from MASTER_ADDR:MASTER_PORT, which is not secret";
    token = "chorus-insecure-" + address.toString();
  }
  std::shared_ptr<store::TcpStoreServer> server;
  if (placement.rank == 0)
    server = processStoreServer(address, *token);
  auto store = std::make_shared<store::TcpStore>(address, *token, Deadline::after(timeout));
  std::string host = bindHost.empty() ? store->localAddress() : bindHost;
  return std::make_unique<StoreConnector>(placement, std::move(store), *token, std::move(server),
                                          std::move(host));
}

// Note [Slurm bootstrap] (slurm.h): on one node without a token, rank 0 draws one and leaves it in
// a 0600 file named by the job and step, which the node's other tasks wait for (up to `deadline`)
// and read; the file is removed when rank 0's process exits.
std::string slurmNodeToken(const Placement& placement, Deadline deadline) {
  const std::string path =
      env::string("TMPDIR").value_or("/tmp") + "/chorus-slurm-" +
      env::string("SLURM_JOB_ID").value_or("0") + "." +
      env::string("SLURM_STEP_ID").value_or(env::string("SLURM_STEPID").value_or("0")) + ".token";
  if (placement.rank == 0) {
    const std::string token = net::generateToken();
    const std::string partial = path + ".partial";
    ::unlink(partial.c_str());
    const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHORUS_CHECK_ARG(fd >= 0, "rank 0 (this process): cannot write the Slurm job's token file ",
                     partial, ": ", std::strerror(errno));
    const std::string line = token + "\n";
    const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ::close(fd);
    CHORUS_CHECK_ARG(written && ::rename(partial.c_str(), path.c_str()) == 0,
                     "rank 0 (this process): cannot write the Slurm job's token file ", path);
    static std::string removeAtExit;
    removeAtExit = path;
    std::atexit([] { ::unlink(removeAtExit.c_str()); });
    return token;
  }
  while (true) {  // rank 0 writes it at start-up: a bounded wait for a file, not for a result
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && (info.st_mode & 077) == 0 && info.st_size > 1) {
      std::ifstream file(path);
      std::string token;
      std::getline(file, token);
      if (!token.empty())
        return token;
    }
    CHORUS_CHECK_ARG(!deadline.expired(), "rank ", placement.rank,
                     " (this process): under srun, the token file ", path,
                     " that rank 0 writes did not appear in time (is rank 0 on this node? set "
                     "CHORUS_JOB_TOKEN in the job's environment instead)");
    ::usleep(10000);
  }
}

// Under srun (Note [Slurm bootstrap]): rank 0 serves the store on the first host of the node
// list, at MASTER_PORT or the port the job and step ids give.
std::unique_ptr<Connector> connectSlurm(std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  Placement placement = slurmPlacement();
  const auto nodeList = env::string("SLURM_STEP_NODELIST") ? env::string("SLURM_STEP_NODELIST")
                                                           : env::string("SLURM_JOB_NODELIST");
  CHORUS_CHECK_ARG(nodeList.has_value(), "rank ", placement.rank,
                   " (this process): under srun, SLURM_JOB_NODELIST is not set");
  const std::vector<std::string> hosts = expandHostList(*nodeList);
  const int port =
      env::integer("MASTER_PORT")
          ? static_cast<int>(*env::integer("MASTER_PORT"))
          : slurmStorePort(
                env::integer("SLURM_JOB_ID").value_or(0),
                env::integer("SLURM_STEP_ID").value_or(env::integer("SLURM_STEPID").value_or(0)));
  net::Address address{hosts.front(), static_cast<uint16_t>(port)};
  auto token = jobToken();
  if (!token) {
    CHORUS_CHECK_ARG(placement.localSize == placement.size, "rank ", placement.rank,
                     " (this process): this srun job spans several nodes, and no job token is "
                     "set; export CHORUS_JOB_TOKEN in the job script (e.g. export "
                     "CHORUS_JOB_TOKEN=$(openssl rand -hex 32)) or point CHORUS_JOB_TOKEN_FILE at "
                     "a 0600 file in the job's shared directory");
    token = slurmNodeToken(placement, deadline);
  }
  std::shared_ptr<store::TcpStoreServer> server;
  if (placement.rank == 0)
    server = processStoreServer(address, *token);
  auto store = std::make_shared<store::TcpStore>(address, *token, deadline);
  std::string host = rankBindAddress().value_or(store->localAddress());
  // A task that joins twice (a second step reusing the first's ids) is refused, naming it, before
  // it touches anything the running job uses.
  const std::string claim = std::to_string(::getpid()) + "@" + hostName();
  const std::string owner = store::toString(store->compareSet(
      "connector/slurm/rank/" + std::to_string(placement.rank), {}, store::toBytes(claim)));
  CHORUS_CHECK_ARG(owner == claim, "rank ", placement.rank, " (this process, node ",
                   placement.nodeRank, ") joined a job whose rank ", placement.rank,
                   " is already taken by ", owner,
                   " (a restarted srun step with the same job and step ids?); the running job is "
                   "left alone");
  return std::make_unique<StoreConnector>(placement, std::move(store), *token, std::move(server),
                                          std::move(host));
}

// Whether the program initialized MPI itself (mpi4py, say): then MPI bootstraps, also under srun.
bool mpiAlreadyInitialized() {
#ifdef CHORUS_WITH_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
#else
  return false;
#endif
}

// mpirun's environment: Open MPI sets OMPI_COMM_WORLD_SIZE, MPICH/Hydra PMI_SIZE, PMIx PMIX_RANK.
bool launchedByMpirun() {
  return env::string("OMPI_COMM_WORLD_SIZE") || env::string("PMI_SIZE") || env::string("PMIX_RANK");
}

}  // namespace

// Rank 0 draws the token that authenticates the ranks' own connections and shares it through the
// store: the store is the program's, and chorus owns only the sockets it opens itself.
std::unique_ptr<Connector> connectThrough(std::shared_ptr<store::Store> store,
                                          int rank,
                                          int size,
                                          std::chrono::milliseconds timeout) {
  CHORUS_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "connectThrough: rank ", rank,
                   " is not a rank of a job of size ", size);
  Placement placement;
  placement.rank = rank;
  placement.size = size;
  placement.localRank = intOr("LOCAL_RANK", rank);
  placement.localSize = intOr("LOCAL_WORLD_SIZE", size);
  placement.nodeId = hostName();
  const std::string tokenKey = "chorus/connector/token";
  if (rank == 0)
    store->set(tokenKey, store::toBytes(net::generateToken()));
  std::string token = store::toString(store->get(tokenKey, Deadline::after(timeout)));
  std::string host = rankBindAddress().value_or("127.0.0.1");
  return std::make_unique<StoreConnector>(placement, std::move(store), std::move(token), nullptr,
                                          std::move(host));
}

std::unique_ptr<Connector> connectFromEnvironment(std::chrono::milliseconds timeout) {
  if (env::string("CHORUS_STORE"))
    return connectChorusrun(timeout);
  if (env::string("RANK") && env::string("WORLD_SIZE") && env::string("MASTER_PORT")) {
    return connectTorchrun(timeout);
  }
  if (launchedBySrun() && !mpiAlreadyInitialized())
    return connectSlurm(timeout);  // Note [Slurm bootstrap]
  if (launchedByMpirun()) {
#ifdef CHORUS_WITH_MPI
    return std::make_unique<MpiConnector>();
#else
    CHORUS_LOG(kWarn) << "this process was started by mpirun, but chorus was built without MPI "
                         "(CHORUS_WITH_MPI=OFF): it runs as a job of one rank";
#endif
  }
  return std::make_unique<VoidConnector>();
}

}  // namespace chorus::connector
