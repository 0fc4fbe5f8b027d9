// The MPI connector. Cost: construction is one MPI_Comm_dup, and one
// MPI_Allgather of MPI_MAX_PROCESSOR_NAME bytes per rank; barrier is MPI_Ibarrier; broadcast is
// two MPI_Ibcast (the length, then the bytes). All complete under the caller's deadline.
#include "connector/mpi_connector.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "connector/bind_address.h"
#include "connector/mpi_environment.h"
#include "core/check.h"
#include "core/env.h"
#include "core/net/handshake.h"

namespace chorus::connector {

MpiConnector::MpiConnector() {
  ensureMpiInitialized();
  checkMpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup(MPI_COMM_WORLD)");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  placeRanks();
}

MpiConnector::~MpiConnector() {
  if (comm_ != MPI_COMM_NULL && !mpiFinalized())
    MPI_Comm_free(&comm_);
}

namespace {

// This rank's node id: "node<k>" for CHORUS_NODE_RANK=k, else the processor name.
std::string ownNodeId() {
  if (const auto nodeRank = env::integer("CHORUS_NODE_RANK"); nodeRank && *nodeRank >= 0)
    return "node" + std::to_string(*nodeRank);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (MPI_Get_processor_name(name, &length) != MPI_SUCCESS || length == 0)
    gethostname(name, sizeof name - 1);
  return std::string(name, strnlen(name, sizeof name));
}

}  // namespace

void MpiConnector::placeRanks() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  ownNodeId().copy(name, sizeof name - 1);
  std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
  checkMpi(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                         MPI_CHAR, comm_),
           "MPI_Allgather(processor names)");
  // Node ranks number the distinct nodes in order of their first rank.
  std::map<std::string, int> nodeRanks;
  for (int r = 0; r < size_; ++r) {
    const char* entry = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    nodeIds_.emplace_back(entry, strnlen(entry, MPI_MAX_PROCESSOR_NAME));
    nodeRanks.emplace(nodeIds_.back(), static_cast<int>(nodeRanks.size()));
  }
  // This rank's id as gathered (cut to MPI_MAX_PROCESSOR_NAME - 1 bytes, like every other).
  const std::string& mine = nodeIds_[rank_];
  nodeRank_ = nodeRanks.at(mine);
  localRank_ = static_cast<int>(std::count(nodeIds_.begin(), nodeIds_.begin() + rank_, mine));
  localSize_ = static_cast<int>(std::count(nodeIds_.begin(), nodeIds_.end(), mine));
}

std::string MpiConnector::hostAddress() const { return rankBindAddress().value_or("127.0.0.1"); }

// Rank 0 serves the store where every rank can reach it: on loopback when the job is on one node,
// on its bind address otherwise (there is no safe guess: Note [Bind address]).
void MpiConnector::startStore(Deadline deadline) {
  if (store_)
    return;
  const bool oneNode = std::all_of(nodeIds_.begin(), nodeIds_.end(),
                                   [&](const std::string& id) { return id == nodeIds_.front(); });
  store::Bytes endpoint;
  if (rank_ == 0) {
    const std::optional<std::string> bindAddress =
        oneNode ? std::optional<std::string>("127.0.0.1") : rankBindAddress();
    if (bindAddress && !isWildcardAddress(*bindAddress)) {  // peers cannot dial 0.0.0.0
      token_ = net::generateToken();
      server_ = std::make_shared<store::TcpStoreServer>(*bindAddress, 0, token_);
      endpoint = store::toBytes(detail::concat(*bindAddress, " ", server_->port(), " ", token_));
    }
  }
  const std::string shared = store::toString(broadcast(endpoint, 0, deadline));
  if (shared.empty()) {  // the same on every rank
    throw UnsupportedError(detail::concat(
        "rank ", rank_,
        " (this process): a job across nodes under mpirun needs the address its store binds for "
        "the shm, tcp and hierarchical backends (this job spans ",
        std::set<std::string>(nodeIds_.begin(), nodeIds_.end()).size(),
        " nodes): set CHORUS_IFNAME=<interface> (mpirun -x CHORUS_IFNAME=eth0) or "
        "CHORUS_BIND_ADDR=<this host's address, not 0.0.0.0> on every rank, or use backend 'mpi'"));
  }
  std::istringstream fields(shared);
  std::string host;
  int port = 0;
  fields >> host >> port >> token_;
  CHORUS_ASSERT(fields && port > 0 && port < 65536);
  store_ = std::make_shared<store::TcpStore>(net::Address{host, static_cast<uint16_t>(port)},
                                             token_, deadline);
}

void MpiConnector::barrier(Deadline deadline) {
  std::lock_guard lock(mutex_);
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  waitMpiRequest(request, deadline,
                 detail::concat("rank ", rank_,
                                " (this process) timed out in the connector's barrier: some rank "
                                "of the MPI job did not reach it"));
}

store::Bytes MpiConnector::broadcast(const store::Bytes& bytes, int root, Deadline deadline) {
  CHORUS_CHECK_ARG(root >= 0 && root < size_, "broadcast root ", root, " is not a rank of the ",
                   size_, "-rank job");
  std::lock_guard lock(mutex_);
  const std::string what = detail::concat("rank ", rank_,
                                          " (this process) timed out in the connector's broadcast "
                                          "from rank ",
                                          root);
  uint64_t length = bytes.size();
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibcast(&length, 1, MPI_UINT64_T, root, comm_, &request), "MPI_Ibcast");
  waitMpiRequest(request, deadline, what);
  store::Bytes result = rank_ == root ? bytes : store::Bytes(length);
  CHORUS_CHECK_ARG(length <= static_cast<uint64_t>(INT32_MAX),
                   "the connector broadcasts at most 2 GiB, not ", length, " bytes");
  checkMpi(MPI_Ibcast(result.data(), static_cast<int>(length), MPI_BYTE, root, comm_, &request),
           "MPI_Ibcast");
  waitMpiRequest(request, deadline, what);
  return result;
}

}  // namespace chorus::connector
