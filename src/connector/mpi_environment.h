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

// Throws chorus::Error naming `call` and MPI's message for `code` unless it is MPI_SUCCESS.
void checkMpi(int code, const char* call);

// Completes `request` by testing it until `deadline` (there is no blocking-with-timeout MPI call),
// yielding the CPU between tests; on expiry throws TimeoutError whose message is `what` and
// leaves the request pending (the communicator is then failed).
void waitMpiRequest(MPI_Request& request, Deadline deadline, const std::string& what);

}  // namespace chorus::connector
