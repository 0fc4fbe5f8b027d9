// See Note [Two halves of the MPI tags] (mpi_tag_halves.h).
#include "core/mpi_tag_halves.h"

#include "core/check.h"

namespace chorus::detail {
namespace {

int64_t halfOf(int first, int last) { return (int64_t{last} - first + 1) / 2; }

}  // namespace

int64_t mpiTagInHalves(uint64_t tag, int first, int last) {
  const int64_t half = halfOf(first, last);
  if (tag < kUpperTagsStart)
    return tag < static_cast<uint64_t>(half) ? first + static_cast<int64_t>(tag) : -1;
  const uint64_t above = tag - kUpperTagsStart;
  return above < static_cast<uint64_t>(half) ? first + half + static_cast<int64_t>(above) : -1;
}

std::string tagsInHalves(int first, int last) {
  const int64_t half = halfOf(first, last);
  return concat("0..", half - 1, " and ", kUpperTagsStart, "..", kUpperTagsStart + half - 1);
}

}  // namespace chorus::detail
