#include "backend/mpi/mpi_error.h"

#include <string>

#include "core/check.h"

namespace chorus::backend::mpi {

void checkMpi(int code, const char* call, int rank, int peer) {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  int errorClass = MPI_ERR_OTHER;
  MPI_Error_class(code, &errorClass);
  const std::string message =
      detail::concat("rank ", rank, " (this process): ", call,
                     peer >= 0 ? detail::concat(" with rank ", peer) : std::string(),
                     " failed in the MPI library: ", std::string(text, length));
  if (errorClass == MPI_ERR_TRUNCATE) {
    std::vector<int> ranks = {rank};
    if (peer >= 0)
      ranks.push_back(peer);
    throw MismatchError(
        message + "; the ranks called it with different counts: call it identically on all ranks",
        "count", ranks);
  }
#ifdef MPIX_ERR_PROC_FAILED
  if (errorClass == MPIX_ERR_PROC_FAILED)
    throw PeerError(message, peer);
#endif
  throw Error(message);
}

}  // namespace chorus::backend::mpi
