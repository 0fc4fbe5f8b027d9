// The MPI connector. Cost: construction is one MPI_Comm_dup, one MPI_Comm_split_type and one
// MPI_Allgather of MPI_MAX_PROCESSOR_NAME bytes per rank; barrier is MPI_Ibarrier; broadcast is
// two MPI_Ibcast (the length, then the bytes). All complete under the caller's deadline.
#include "connector/mpi_connector.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "connector/mpi_environment.h"
#include "core/check.h"
#include "core/net/handshake.h"

namespace chorus::connector {

MpiConnector::MpiConnector() {
  ensureMpiInitialized();
  checkMpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup(MPI_COMM_WORLD)");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  MPI_Comm local = MPI_COMM_NULL;
  checkMpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
           "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  MPI_Comm_rank(local, &localRank_);
  MPI_Comm_size(local, &localSize_);
  MPI_Comm_free(&local);
  gatherNodeIds();
}

MpiConnector::~MpiConnector() {
  if (comm_ != MPI_COMM_NULL && !mpiFinalized())
    MPI_Comm_free(&comm_);
}

void MpiConnector::gatherNodeIds() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (MPI_Get_processor_name(name, &length) != MPI_SUCCESS || length == 0) {
    gethostname(name, sizeof name - 1);
  }
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
  nodeRank_ = nodeRanks.at(nodeIds_[rank_]);
}

void MpiConnector::startStore(Deadline deadline) {
  if (store_)
    return;
  const bool oneNode = std::all_of(nodeIds_.begin(), nodeIds_.end(),
                                   [&](const std::string& id) { return id == nodeIds_.front(); });
  if (!oneNode) {
    throw UnsupportedError(
        detail::concat("rank ", rank_,
                       " (this process): the shm and tcp backends under mpirun need the whole "
                       "job on one node for now (this job spans ",
                       std::set<std::string>(nodeIds_.begin(), nodeIds_.end()).size(),
                       " nodes); use backend 'mpi' or "
                       "'mpi_algorithms', or launch with chorusrun"));
  }
  store::Bytes endpoint;
  if (rank_ == 0) {
    token_ = net::generateToken();
    server_ = std::make_shared<store::TcpStoreServer>("127.0.0.1", 0, token_);
    endpoint = store::toBytes(detail::concat(server_->port(), " ", token_));
  }
  const std::string shared = store::toString(broadcast(endpoint, 0, deadline));
  const size_t space = shared.find(' ');
  CHORUS_ASSERT(space != std::string::npos);
  token_ = shared.substr(space + 1);
  const net::Address address{"127.0.0.1",
                             static_cast<uint16_t>(std::stoi(shared.substr(0, space)))};
  store_ = std::make_shared<store::TcpStore>(address, token_, deadline);
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
