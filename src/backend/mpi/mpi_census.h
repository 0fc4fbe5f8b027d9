// MpiCensus: the stall inspector's census (Note [Stall inspector], core/stall_watch.h) for the
// native MPI backend, which has no store to keep it in.
//
// A rank whose collective has stalled (stall::kNoteAfter) sends the collective's number to every
// other rank, on a duplicate of the backend's communicator kept for these notes alone. missing()
// reads the notes that have come in and names the ranks that noted neither this collective nor a
// later one: a rank that never called it has noted nothing, while every rank that waits in it has.
// As with the store's census, numbers only grow (a rank that noted collective 9 has arrived at
// every earlier one), and a rank that arrived less than kNoteAfter before the question is asked
// may still be named.
//
// Cost: an MPI_Iprobe every 64 collectives; once a collective stalls, size - 1 eight-byte sends,
// and a read of the notes that have come in when a warning or a TimeoutError names ranks. Notes
// are never answered; a note still in flight when the backend is destroyed is dropped with its
// communicator.
//
// Agreement (Note [Census agreement]) needs nothing here: the ranks agree on their calls before
// each collective (Note [Fingerprints over MPI], mpi_backend.cc).
//
// Threading: used by the thread that runs the backend's collectives, one at a time. Only compiled
// when CHORUS_WITH_MPI is on.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "core/deadline.h"
#include "core/rank_names.h"
#include "core/stall_watch.h"

namespace chorus::backend::mpi {

class MpiCensus final : public stall::Census {
 public:
  // Duplicates `comm` (collective over it; TimeoutError at `deadline`). missing() names the ranks
  // by `names` (Note [One rank numbering]).
  MpiCensus(MPI_Comm comm, detail::RankNames names, Deadline deadline);
  ~MpiCensus() override;
  MpiCensus(const MpiCensus&) = delete;
  MpiCensus& operator=(const MpiCensus&) = delete;

  // The collective that the notes and missing() are about from now on (every 64th also reads
  // the notes that have come in, so that they do not pile up in MPI on a rank that never stalls).
  void begin(uint64_t sequence);

  void noteArrived() noexcept override;
  std::vector<int> missing() noexcept override;
  void checkAgreement() override {}

 private:
  // Reads every note that has come in.
  void drain();

  MPI_Comm comm_ = MPI_COMM_NULL;
  detail::RankNames names_;
  int rank_ = 0;
  int size_ = 1;
  uint64_t sequence_ = 0;
  uint64_t noted_ = 0;              // what the sends below carry: their buffer
  std::vector<MPI_Request> sends_;  // the last note's, by peer
  std::vector<uint64_t> heard_;     // the latest collective each rank noted, by rank
};

}  // namespace chorus::backend::mpi
