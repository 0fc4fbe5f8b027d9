// chorus-bench's point-to-point row (point_to_point.cc): sendrecv, a ring shift of one message per
// rank, and the neighbours it uses, shared with the MPI reference (mpi_reference.cc), which times
// MPI_Send and MPI_Recv between the same ranks in the same order.
#pragma once

#include "collective.h"

namespace chorus::bench {

// The rank this rank receives from (rank - 1) and sends to (rank + 1), modulo the ranks.
int sendrecvLeft(const Call& call);
int sendrecvRight(const Call& call);

extern const Collective kSendrecv;

}  // namespace chorus::bench
