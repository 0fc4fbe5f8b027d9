// The MPI transport: chorus's point-to-point contract (src/transport/transport.h) over MPI
// non-blocking sends and receives on a private duplicate of an MPI communicator. It lets chorus's
// own algorithms (backend "mpi_algorithms", and the fallbacks of backend "mpi") run where the
// processes were started by mpirun.
//
// Limits:
//  - MPI must be initialized (MPI_Init_thread, MPI_THREAD_MULTIPLE when several threads use MPI)
//    before createMpiTransport and still initialized when the transport is destroyed.
//  - Point-to-point tags are the two halves of Note [Two halves of the MPI tags]
//    (core/mpi_tag_halves.h) over MPI tags 1025 .. MPI_TAG_UB: 0 .. h - 1 and 2^30 .. 2^30 + h - 1,
//    h = (MPI_TAG_UB - 1024) / 2 (MPI guarantees MPI_TAG_UB >= 32767; Open MPI 4 gives 2^31 - 1);
//    collective tags are below kCollectiveTag + 1024; others are InvalidArgumentError. MPI tag 0
//    is reserved for control notices.
//  - A peer that dies is usually handled by the MPI library itself: Open MPI (mpirun) kills the
//    whole job when a rank exits without MPI_Finalize, so chorus never sees a "dead peer". With
//    ULFM-style libraries the failed MPI call is reported as PeerError.
#pragma once

#include <mpi.h>

#include <memory>

#include "core/rank_names.h"
#include "transport/transport.h"

namespace chorus::transport::mpi {

// Duplicates `comm` (collective over its members; the transport owns and frees the duplicate),
// sets MPI_ERRORS_RETURN on it, and returns a transport whose ranks are the ranks in `comm`. The
// duplicate is freed once this transport and every peer's have closed (Note [Retiring an MPI
// communicator] in transport.cc), or left to MPI_Finalize.
// Throws UnsupportedError when MPI is not initialized, and TimeoutError when some member has not
// joined the duplication by `deadline` (MPI_Comm_idup, tested in a loop). Its errors name the
// ranks by `names` (Note [One rank numbering]).
std::unique_ptr<Transport> createMpiTransport(MPI_Comm comm,
                                              Deadline deadline = Deadline::never(),
                                              detail::RankNames names = {});

}  // namespace chorus::transport::mpi
