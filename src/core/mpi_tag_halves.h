// mpiTagInHalves: where a chorus point-to-point tag goes among an MPI library's tags.
//
// Note [Two halves of the MPI tags]
// chorus's point-to-point tags come in two ranges: a program's own, below 2^30, and those from
// 2^30 up, where chorus.torch.nn.functional's send/recv sends each gradient back (tag +
// GRAD_TAG_OFFSET, 2^30) so that it is never taken for a message of the program. MPI promises
// tags only up to MPI_TAG_UB, which may be as little as 32767 (Open MPI 6 gives that; Open MPI 4
// gives 2^31 - 1). So the MPI transport and the mpi backend split the MPI tags they have for
// point-to-point, [first, last], into two halves of `half` = (last - first + 1) / 2 tags: chorus
// tags 0 .. half - 1 take the lower half, and 2^30 .. 2^30 + half - 1 the upper one. Both ranges
// then work on every MPI; other tags have no MPI tag (InvalidArgumentError at the call).
//
// Contract: pure arithmetic, any thread. `first` <= `last`, both non-negative.
#pragma once

#include <cstdint>
#include <string>

namespace chorus::detail {

inline constexpr uint64_t kUpperTagsStart = uint64_t{1} << 30;

// The MPI tag of chorus tag `tag` among [first, last], or -1 when it has none.
int64_t mpiTagInHalves(uint64_t tag, int first, int last);
// The chorus tags that have an MPI tag, e.g. "0..15870 and 1073741824..1073757694".
std::string tagsInHalves(int first, int last);

}  // namespace chorus::detail
