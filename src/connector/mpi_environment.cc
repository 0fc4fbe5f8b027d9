// MPI initialization, finalization at exit, and request completion under a deadline.
#include "connector/mpi_environment.h"

#include <sched.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/check.h"

namespace chorus::connector {
namespace {

std::mutex initMutex;

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

}  // namespace

void ensureMpiInitialized() {
  std::lock_guard lock(initMutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    if (mpiFinalized()) {
      throw Error("MPI was already finalized in this process; chorus cannot use it any more");
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      throw UnsupportedError(detail::concat(
          "MPI was initialized with thread level ", provided,
          " but chorus needs MPI_THREAD_MULTIPLE; initialize MPI with "
          "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let chorus initialize it"));
    }
    return;
  }
  int provided = 0;
  checkMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  // chorus owns this initialization: errors come back as codes, and MPI is finalized at exit.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finalizeAtExit);
  if (provided != MPI_THREAD_MULTIPLE) {
    throw UnsupportedError(detail::concat(
        "the MPI library provides thread level ", provided,
        " but chorus needs MPI_THREAD_MULTIPLE; use an MPI built with thread support "
        "(Open MPI: --enable-mpi-thread-multiple)"));
  }
}

bool mpiFinalized() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void checkMpi(int code, const char* call, int rank, int peer) {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  int errorClass = MPI_ERR_OTHER;
  MPI_Error_class(code, &errorClass);
  const std::string message =
      detail::concat(rank >= 0 ? detail::concat("rank ", rank, " (this process): ") : std::string(),
                     call, peer >= 0 ? detail::concat(" with rank ", peer) : std::string(),
                     " failed in the MPI library: ", std::string(text, length));
  if (errorClass == MPI_ERR_TRUNCATE) {
    std::vector<int> ranks;
    for (int named : {rank, peer}) {
      if (named >= 0)
        ranks.push_back(named);
    }
    throw MismatchError(
        message + "; the ranks called it with different counts: call it identically on all ranks",
        "count", ranks);
  }
  bool processFailed = false;
#ifdef MPIX_ERR_PROC_FAILED
  processFailed = errorClass == MPIX_ERR_PROC_FAILED;
#endif
  if (errorClass == MPI_ERR_ARG && !processFailed) {
    throw InternalError(message + "; this is a bug in chorus or the MPI library, please report it");
  }
  if (peer >= 0)
    throw PeerError(message + "; the peer may have died", peer);
  throw Error(message);
}

void waitMpiRequest(MPI_Request& request, Deadline deadline, const std::string& what) {
  for (int pass = 0;; ++pass) {
    int done = 0;
    checkMpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done)
      return;
    if ((pass & 63) == 0 && deadline.expired())
      throw TimeoutError(what);
    sched_yield();
  }
}

}  // namespace chorus::connector
