// MpiCensus: arrival notes as MPI messages. See mpi_census.h.
#include "backend/mpi/mpi_census.h"

#include <algorithm>

#include "connector/mpi_environment.h"
#include "core/check.h"

namespace chorus::backend::mpi {
namespace {

constexpr int kNoteTag = 1;
// Collectives between two reads of the notes that have come in (MPI_Iprobe: well under a
// microsecond when there are none).
constexpr uint64_t kDrainEvery = 64;

}  // namespace

MpiCensus::MpiCensus(MPI_Comm comm, detail::RankNames names, Deadline deadline)
    : names_(std::move(names)) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  // MPI writes the new communicator when the last rank joins, which may be after a timeout here:
  // the handle lives on the heap and is left to MPI if the wait times out.
  auto* handle = new MPI_Comm(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  const int code = MPI_Comm_idup(comm, handle, &request);
  if (code != MPI_SUCCESS)
    delete handle;
  connector::checkMpi(code, "MPI_Comm_idup (census)", names_(rank_));
  connector::waitMpiRequest(request, deadline,
                            detail::concat("rank ", names_(rank_),
                                           " (this process) timed out creating the MPI backend's "
                                           "census communicator: some rank did not join"));
  comm_ = *handle;
  delete handle;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  sends_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  heard_.assign(static_cast<size_t>(size_), 0);
}

MpiCensus::~MpiCensus() {
  if (comm_ == MPI_COMM_NULL || connector::mpiFinalized())
    return;
  drain();  // what has come in; a note still on its way is dropped with the communicator
  for (MPI_Request& send : sends_) {
    if (send != MPI_REQUEST_NULL)
      MPI_Request_free(&send);  // an eight-byte send: it completes on its own
  }
  MPI_Comm_free(&comm_);
}

void MpiCensus::begin(uint64_t sequence) {
  sequence_ = sequence;
  // Notes reach ranks that never stall too: read them now and then, so they do not pile up.
  if (sequence % kDrainEvery == 0)
    drain();
}

void MpiCensus::noteArrived() noexcept {
  drain();
  int done = 0;
  // An earlier note still on its way (its buffer may not change yet) says less than this one:
  // the peers may then name this rank as missing, a wrong name but no wrong result.
  if (MPI_Testall(size_, sends_.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !done)
    return;
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
      missing.push_back(names_(rank));
  }
  return missing;
}

}  // namespace chorus::backend::mpi
