// The MPI library's lifetime as chorus sees it, shared by the MPI connector, transport and backend.
//
// ensureMpiInitialized() initializes MPI with MPI_THREAD_MULTIPLE (operations run on each
// communicator's worker thread or on a waiting caller's thread, several communicators at once). If
// the program (or mpi4py, or a harness) already initialized MPI, chorus uses it as it is, requires
// MPI_THREAD_MULTIPLE, and never finalizes it. Otherwise chorus finalizes MPI at exit (atexit),
// after the chorus context has closed its communicators (see DistContext). Once MPI is finalized
// (by chorus or by the program), MPI objects still held are dropped without being freed:
// destructors check mpiFinalized() first.
//
// Only compiled when CHORUS_WITH_MPI is on.
#pragma once

#include <mpi.h>

#include <string>

#include "core/deadline.h"

namespace chorus::connector {

// Thread-safe; idempotent. Throws UnsupportedError when MPI cannot provide MPI_THREAD_MULTIPLE and
// Error when MPI was already finalized.
void ensureMpiInitialized();

// True once MPI_Finalize has been called; safe to call at any time, also during exit.
bool mpiFinalized() noexcept;

// The one place MPI status codes become chorus errors (the connector, the MPI transport and the
// MPI backend all call it; every communicator chorus uses has MPI_ERRORS_RETURN). Throws unless
// `code` is MPI_SUCCESS; the message names `call`, this process as rank `rank` and the `peer`
// involved (-1: none or unknown; pass world ranks, Note [One rank numbering]) and MPI's text:
//  - MPI_ERR_TRUNCATE (a message longer than its receive): MismatchError on "count", naming both;
//  - MPI_ERR_ARG (chorus passed MPI something invalid): InternalError;
//  - a process failure the library reports (ULFM's MPIX_ERR_PROC_FAILED), or any other failure
//    of a call with a peer: PeerError naming the peer, which may have died;
//  - anything else: chorus::Error.
void checkMpi(int code, const char* call, int rank = -1, int peer = -1);

// Completes `request` by testing it until `deadline` (there is no blocking-with-timeout MPI call),
// yielding the CPU between tests; on expiry throws TimeoutError whose message is `what` and
// leaves the request pending (the communicator is then failed).
void waitMpiRequest(MPI_Request& request, Deadline deadline, const std::string& what);

}  // namespace chorus::connector
