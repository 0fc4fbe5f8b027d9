// MPI status codes -> chorus errors, in one place for the MPI backend. Every communicator the
// backend uses has MPI_ERRORS_RETURN, so MPI reports failures as codes and never exits the process.
#pragma once

#include <mpi.h>

namespace chorus::backend::mpi {

// Throws unless `code` is MPI_SUCCESS: MismatchError for truncation (a message longer than the
// receiving buffer: the ranks disagree on a count), PeerError for a failed process where the
// library reports one (ULFM), chorus::Error otherwise. `rank` is this process's rank in the
// communicator and `peer` the peer involved, or -1.
void checkMpi(int code, const char* call, int rank, int peer = -1);

}  // namespace chorus::backend::mpi
