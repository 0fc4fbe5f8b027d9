// Slurm's compressed lists (src/connector/slurm.h), against lists written out by hand.
#include "connector/slurm.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus::connector {
namespace {

using Hosts = std::vector<std::string>;

TEST(SlurmHostList, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(expandHostList("node[01-04,07]"),
            (Hosts{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expandHostList("gpu3"), (Hosts{"gpu3"}));
  EXPECT_EQ(expandHostList("a[8-10],b,c[1]"), (Hosts{"a8", "a9", "a10", "b", "c1"}));
  EXPECT_EQ(expandHostList("r[1-2]n[1-2]"), (Hosts{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expandHostList("x[098-101]"), (Hosts{"x098", "x099", "x100", "x101"}));
}

TEST(SlurmHostList, RefusesMalformedLists) {
  for (const char* bad : {"", "node[1-", "node]1[", "node[3-1]", "node[a-b]", "a,,b", "n[[1]]"})
    EXPECT_THROW(expandHostList(bad), InvalidArgumentError) << bad;
}

TEST(SlurmTasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(expandTasksPerNode("4(x2),3"), (std::vector<int>{4, 4, 3}));
  EXPECT_EQ(expandTasksPerNode("2"), (std::vector<int>{2}));
  EXPECT_EQ(expandTasksPerNode("1,2(x1),5(x3)"), (std::vector<int>{1, 2, 5, 5, 5}));
  for (const char* bad : {"", "x", "4(x2", "4(xa)", "4,,3"})
    EXPECT_THROW(expandTasksPerNode(bad), InvalidArgumentError) << bad;
}

TEST(SlurmStorePort, IsInRangeAndDiffersBetweenSteps) {
  EXPECT_EQ(slurmStorePort(0, 0), 20000);
  EXPECT_EQ(slurmStorePort(1234, 2), 20000 + (1234 * 8 + 2) % 20000);
  EXPECT_NE(slurmStorePort(1234, 0), slurmStorePort(1234, 1));
  for (long long job : {1LL, 99999LL, 123456789LL}) {
    const int port = slurmStorePort(job, 3);
    EXPECT_GE(port, 20000);
    EXPECT_LT(port, 40000);
  }
}

}  // namespace
}  // namespace chorus::connector
