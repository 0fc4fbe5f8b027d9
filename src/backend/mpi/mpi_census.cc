// MpiCensus: arrival notes as MPI messages. See mpi_census.h.
#include "backend/mpi/mpi_census.h"

#include <algorithm>

#include "backend/mpi/mpi_error.h"
#include "connector/mpi_environment.h"
#include "core/check.h"

namespace chorus::backend::mpi {
namespace {

constexpr int kNoteTag = 1;

}  // namespace

MpiCensus::MpiCensus(MPI_Comm comm, Deadline deadline) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Comm_idup(comm, &comm_, &request), "MPI_Comm_idup (census)", rank_);
  connector::waitMpiRequest(request, deadline,
                            detail::concat("rank ", rank_,
                                           " (this process) timed out creating the MPI backend's "
                                           "census communicator: some rank did not join"));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  sends_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  heard_.assign(static_cast<size_t>(size_), 0);
}

MpiCensus::~MpiCensus() {
  if (comm_ == MPI_COMM_NULL || connector::mpiFinalized())
    return;
  for (MPI_Request& send : sends_) {
    if (send != MPI_REQUEST_NULL)
      MPI_Request_free(&send);  // an eight-byte send: it completes on its own
  }
  MPI_Comm_free(&comm_);
}

void MpiCensus::noteArrived() noexcept {
  int done = 0;
  if (MPI_Testall(size_, sends_.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !done)
    return;  // the last note is still on its way: its buffer may not change
  noted_ = sequence_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ &&
        MPI_Isend(&noted_, 1, MPI_UINT64_T, peer, kNoteTag, comm_, &sends_[peer]) != MPI_SUCCESS)
      sends_[peer] = MPI_REQUEST_NULL;
  }
}

void MpiCensus::drain() {
  while (true) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kNoteTag, comm_, &arrived, &status) != MPI_SUCCESS || !arrived)
      return;
    uint64_t sequence = 0;
    if (MPI_Recv(&sequence, 1, MPI_UINT64_T, status.MPI_SOURCE, kNoteTag, comm_,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    heard_[status.MPI_SOURCE] = std::max(heard_[status.MPI_SOURCE], sequence);
  }
}

std::vector<int> MpiCensus::missing() noexcept {
  drain();
  std::vector<int> missing;
  for (int rank = 0; rank < size_; ++rank) {
    if (rank != rank_ && heard_[rank] < sequence_)
      missing.push_back(rank);
  }
  return missing;
}

}  // namespace chorus::backend::mpi
