// Note [Two halves of the MPI tags]: the MPI tags of chorus's two tag ranges, worked by hand for
// the least MPI_TAG_UB that MPI allows (32767) and for Open MPI 4's (2^31 - 1), with the MPI
// transport's first point-to-point tag (1025) and the mpi backend's (0).
#include "core/mpi_tag_halves.h"

#include <gtest/gtest.h>

#include <set>

namespace chorus::detail {
namespace {

constexpr uint64_t k2To30 = uint64_t{1} << 30;

TEST(MpiTagHalves, TheLeastTagUpperBoundHoldsBothRanges) {
  // [1025, 32767]: 31743 tags, halves of 15871.
  EXPECT_EQ(mpiTagInHalves(0, 1025, 32767), 1025);
  EXPECT_EQ(mpiTagInHalves(15870, 1025, 32767), 16895);
  EXPECT_EQ(mpiTagInHalves(15871, 1025, 32767), -1);
  EXPECT_EQ(mpiTagInHalves(k2To30 - 1, 1025, 32767), -1);
  EXPECT_EQ(mpiTagInHalves(k2To30, 1025, 32767), 16896);
  EXPECT_EQ(mpiTagInHalves(k2To30 + 15870, 1025, 32767), 32766);
  EXPECT_EQ(mpiTagInHalves(k2To30 + 15871, 1025, 32767), -1);
  EXPECT_EQ(tagsInHalves(1025, 32767), "0..15870 and 1073741824..1073757694");
}

TEST(MpiTagHalves, OpenMpiFoursBoundHoldsNearlyAllOfBoth) {
  constexpr int kUb = 2147483647;  // [0, 2^31 - 1]: 2^31 tags, halves of 2^30
  EXPECT_EQ(mpiTagInHalves(k2To30 - 1, 0, kUb), int64_t{k2To30 - 1});
  EXPECT_EQ(mpiTagInHalves(k2To30, 0, kUb), int64_t{k2To30});
  EXPECT_EQ(mpiTagInHalves(2 * k2To30 - 1, 0, kUb), int64_t{kUb});
  EXPECT_EQ(mpiTagInHalves(2 * k2To30, 0, kUb), -1);
  // [1025, 2^31 - 1]: 2^31 - 1025 tags, halves of 2^30 - 513 (one tag left over).
  EXPECT_EQ(mpiTagInHalves(k2To30 - 514, 1025, kUb), int64_t{k2To30 + 511});
  EXPECT_EQ(mpiTagInHalves(k2To30 - 513, 1025, kUb), -1);
  EXPECT_EQ(mpiTagInHalves(k2To30, 1025, kUb), int64_t{k2To30 + 512});
  EXPECT_EQ(mpiTagInHalves(2 * k2To30 - 514, 1025, kUb), int64_t{kUb} - 1);
  EXPECT_EQ(mpiTagInHalves(2 * k2To30 - 513, 1025, kUb), -1);
}

TEST(MpiTagHalves, EveryTagOfBothRangesHasItsOwnMpiTagInsideTheBounds) {
  std::set<int64_t> used;
  for (uint64_t start : {uint64_t{0}, k2To30}) {
    for (uint64_t tag = start; tag < start + 200; ++tag) {
      const int64_t mpiTag = mpiTagInHalves(tag, 7, 406);  // 400 tags: halves of 200
      ASSERT_GE(mpiTag, 7) << tag;
      ASSERT_LE(mpiTag, 406) << tag;
      EXPECT_TRUE(used.insert(mpiTag).second) << "tag " << tag << " shares MPI tag " << mpiTag;
    }
  }
  EXPECT_EQ(mpiTagInHalves(200, 7, 406), -1);
  EXPECT_EQ(mpiTagInHalves(k2To30 + 200, 7, 406), -1);
}

}  // namespace
}  // namespace chorus::detail
