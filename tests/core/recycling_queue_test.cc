// RecyclingQueue (core/recycling_queue.h) and FunctionRef (core/function_ref.h), the containers of
// the allocation-free hot path: first in first out across the compactions that keep the storage
// bounded, elements released when popped, and calls through a reference reaching the callable.
#include "core/recycling_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/function_ref.h"

namespace chorus::detail {
namespace {

// Never empty for long (one more pushed than popped per step, then drained): the order is kept
// through every compaction.
TEST(RecyclingQueueTest, FirstInFirstOutAcrossCompactions) {
  RecyclingQueue<std::string> queue;
  int pushed = 0;
  int popped = 0;
  for (int step = 0; step < 500; ++step) {
    queue.push_back(std::to_string(pushed++));
    queue.push_back(std::to_string(pushed++));
    ASSERT_EQ(queue.front(), std::to_string(popped++));
    queue.pop_front();
  }
  EXPECT_EQ(queue.size(), 500u);
  int expected = popped;
  for (const std::string& item : queue) EXPECT_EQ(item, std::to_string(expected++));
  while (!queue.empty()) {
    ASSERT_EQ(queue.front(), std::to_string(popped++));
    queue.pop_front();
  }
  EXPECT_EQ(popped, pushed);
}

TEST(RecyclingQueueTest, PopReleasesTheElementAtOnce) {
  RecyclingQueue<std::shared_ptr<int>> queue;
  auto first = std::make_shared<int>(1);
  queue.push_back(first);
  queue.push_back(std::make_shared<int>(2));
  EXPECT_EQ(first.use_count(), 2);
  queue.pop_front();
  EXPECT_EQ(first.use_count(), 1);
  EXPECT_EQ(*queue.front(), 2);
}

TEST(FunctionRefTest, CallsWhatItRefersTo) {
  int calls = 0;
  std::vector<int> seen;
  auto record = [&](int value) {
    ++calls;
    seen.push_back(value);
  };
  FunctionRef<void(int)> ref(record);
  ASSERT_TRUE(static_cast<bool>(ref));
  ref(3);
  ref(4);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(seen, (std::vector<int>{3, 4}));
  auto twice = [](int value) { return 2 * value; };
  FunctionRef<int(int)> function(twice);
  EXPECT_EQ(function(21), 42);
  FunctionRef<int(int)> copy = function;
  EXPECT_EQ(copy(5), 10);
  EXPECT_FALSE(static_cast<bool>(FunctionRef<void(int)>()));
  EXPECT_FALSE(static_cast<bool>(FunctionRef<void(int)>(nullptr)));
}

}  // namespace
}  // namespace chorus::detail
