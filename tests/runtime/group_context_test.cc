// groupContext (runtime/group_context.h): what a sub-communicator's errors say about their group.
#include "runtime/group_context.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace chorus::detail {
namespace {

TEST(GroupContext, TheWorldInWorldOrderNeedsNone) {
  EXPECT_EQ(groupContext({}), "");
  EXPECT_EQ(groupContext({0}), "");
  EXPECT_EQ(groupContext({0, 1, 2, 3}), "");
}

TEST(GroupContext, AGroupListsItsMembersInItsOrder) {
  EXPECT_EQ(groupContext({2, 5, 7}), "in the group of world ranks [2, 5, 7]: ");
  EXPECT_EQ(groupContext({1, 0}), "in the group of world ranks [1, 0]: ");  // the world, reordered
  EXPECT_EQ(groupContext({3}), "in the group of world ranks [3]: ");
}

TEST(GroupContext, ALargeGroupShowsSixteenAndItsSize) {
  std::vector<int> members(20);
  std::iota(members.begin(), members.end(), 100);
  EXPECT_EQ(groupContext(members),
            "in the group of world ranks [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, "
            "111, 112, 113, 114, 115, … (20 in all)]: ");
}

}  // namespace
}  // namespace chorus::detail
