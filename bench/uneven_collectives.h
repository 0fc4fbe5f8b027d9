// chorus-bench's uneven collectives (uneven_collectives.cc): the split sizes of its alltoallv row,
// shared with the MPI reference (mpi_reference.cc), which times MPI_Alltoallv on the same blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "collective.h"

namespace chorus::bench {

// Chunks of `count` elements that rank `from` sends rank `to`: 0, 1 or 2.
int64_t unevenWeight(int from, int to);

// This rank's blocks in elements: to each rank, from each rank, and their sums.
struct UnevenSplits {
  std::vector<int64_t> send;
  std::vector<int64_t> recv;
  int64_t sendTotal = 0;
  int64_t recvTotal = 0;
};
UnevenSplits unevenSplits(const Call& call);

extern const Collective kAlltoallv;

}  // namespace chorus::bench
