// The MPI library's own collectives, timed by chorus-bench --compare mpi next to chorus's.
//
// Under mpirun chorus bootstraps through its MPI connector, which initializes MPI (with
// MPI_THREAD_MULTIPLE) before the first communicator exists. MpiReference then issues the matching
// MPI collective on MPI_COMM_WORLD, on the very buffers and shapes of a chorus-bench row (Call), so
// the row's fill() and countWrong() check MPI's result against the same closed forms:
//
//   allreduce      MPI_Allreduce(MPI_IN_PLACE, out)        reduce   MPI_Reduce (in place on root)
//   allgather      MPI_Allgather(in -> out)                 gather   MPI_Gather(in -> out, root)
//   reduce_scatter MPI_Reduce_scatter_block(in -> out)      scatter  MPI_Scatter(in -> out, root)
//   broadcast      MPI_Bcast(out, root)                     alltoall MPI_Alltoall(in -> out)
//   barrier        MPI_Barrier
//
// Dtypes map to MPI_FLOAT, MPI_DOUBLE, MPI_INT8_T, MPI_UINT8_T, MPI_INT32_T, MPI_INT64_T and
// MPI_C_BOOL; float16 and bfloat16 have no MPI type. Ops map to MPI_SUM, MPI_PROD, MPI_MIN,
// MPI_MAX, MPI_BAND, MPI_BOR, MPI_BXOR (on bool, chorus's logical meaning: MPI_LOR, MPI_LAND,
// MPI_LXOR); avg has no MPI op.
//
// Only compiled with CHORUS_WITH_MPI (mpi_reference.cc); the header names no MPI type.
#pragma once

#include <memory>
#include <string>

#include "chorus/communicator.h"
#include "chorus/types.h"
#include "collective.h"

namespace chorus::bench {

// Why --compare mpi cannot time this dtype and op, or "" when it can. `reduces`: whether a
// reducing collective is among those requested (only then does `op` matter).
std::string mpiComparisonRefusal(DataType dtype, ReduceOp op, bool reduces);

class MpiReference {
 public:
  // Checks that MPI is initialized (the job was started by mpirun, so chorus used its MPI
  // connector) and that MPI_COMM_WORLD has the ranks of `comm` in the same order. Throws
  // chorus::InvalidArgumentError naming this rank and what to do otherwise.
  static std::unique_ptr<MpiReference> forCommunicator(const Communicator& comm);

  // One blocking MPI collective matching `collective` on the buffers and shape of `call`.
  // Throws chorus::Error when MPI reports a failure.
  void run(const Collective& collective, const Call& call) const;

  // The MPI library's name and version, e.g. "Open MPI v4.1.4" (first line of
  // MPI_Get_library_version).
  std::string libraryName() const;

  // The MPI function that `collective` is timed against, e.g. "MPI_Allreduce".
  static std::string functionName(const Collective& collective);
};

}  // namespace chorus::bench
