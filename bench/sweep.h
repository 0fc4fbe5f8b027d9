// One nccl-tests-style sweep: a collective timed over sizes min, min*factor, ... <= max, printed
// as a table on rank 0. Collective: every rank of the communicator calls it with the same options.
#pragma once

#include <cstdint>

#include "chorus/communicator.h"
#include "collective.h"
#include "options.h"

namespace chorus::bench {

// Runs the sweep and returns the number of wrong elements summed over ranks and sizes (0 without
// --check). Errors from the communicator (chorus::Error) propagate.
int64_t runSweep(Communicator& comm, const BenchOptions& options, const Collective& collective);

}  // namespace chorus::bench
