// The launcher's record of the first rank of a job that failed (exited non-zero or was killed), in
// the job's store, for ranks that cannot see that death themselves: a rank whose GPU work waits on
// the dead rank inside NCCL has no connection to it that would close (the CUDA watchdog,
// runtime/device_watchdog.h, reads this). chorusrun writes it as soon as it reaps the rank; under
// mpirun nobody does. Key "job/failed_rank", value "<world rank> <what happened>"; the first
// record wins (compareSet), later ones are dropped.
#pragma once

#include <optional>
#include <string>

#include "store/store.h"

namespace chorus::store {

inline constexpr const char* kFailedRankKey = "job/failed_rank";

struct RankFailure {
  int rank = -1;     // world rank
  std::string what;  // e.g. "rank 1 was killed by SIGKILL"
};

// Records `failure` unless a failure is already recorded. Throws the store's errors.
void recordRankFailure(Store& store, const RankFailure& failure);
// The recorded failure, waiting for one until `deadline` (an expired deadline only looks); none
// when nothing was recorded by then. Throws the store's other errors.
std::optional<RankFailure> recordedRankFailure(Store& store, Deadline deadline);

// The launcher's record of a rank that exited with code 0 while others still ran (key
// "job/exited/<world rank>", value what happened): not a failure of the job, but a rank that has
// not joined a communicator by then never will (Note [A rank that never joins]).
void recordEarlyExit(Store& store, int rank, const std::string& what);
// What was recorded for `rank`, if anything (looks without waiting). Throws the store's errors.
std::optional<std::string> recordedEarlyExit(Store& store, int rank);

}  // namespace chorus::store
