// One nccl-tests-style sweep: a collective timed over sizes min, min*factor, ... <= max, printed
// as a table on rank 0. Collective: every rank of the communicator calls it with the same options.
//
// With a reference (--compare mpi: the MPI library's own collective), every row also times the
// reference on the same buffers, its timed loops alternating with chorus's (timing.h), and checks
// it against the same closed form.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "collective.h"
#include "options.h"
#include "report.h"

namespace chorus::bench {

// Another implementation of the collective being swept.
struct ReferenceCollective {
  std::string description;               // for the table header, e.g. "MPI_Allreduce of ..."
  std::function<void(const Call&)> run;  // one blocking call on the row's buffers
};

// The rows to run: sizes min, min*factor, ... <= max, as the collective rounds them, skipping
// sizes that round to nothing or to the previous row (one row of size 0 for barrier).
std::vector<Shape> plannedShapes(const BenchOptions& options,
                                 const Collective& collective,
                                 int ranks);

// Runs the sweep and returns the number of wrong elements summed over ranks, sizes and both
// implementations (0 without --check). `reference` may be null; `report` is non-null on rank 0
// only. Errors from the communicator or the reference (chorus::Error) propagate.
int64_t runSweep(Communicator& comm,
                 const BenchOptions& options,
                 const Collective& collective,
                 const ReferenceCollective* reference,
                 Report* report);

}  // namespace chorus::bench
