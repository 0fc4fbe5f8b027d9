// What a sub-communicator's errors say about their group: see group_context.h.
#include "runtime/group_context.h"

#include "core/check.h"

namespace chorus::detail {
namespace {

// Members listed in the prefix; a larger group's list ends in "…".
constexpr size_t kMembersShown = 16;

bool isWorldOrder(const std::vector<int>& worldRanks) {
  for (size_t i = 0; i < worldRanks.size(); ++i) {
    if (worldRanks[i] != static_cast<int>(i))
      return false;
  }
  return true;
}

}  // namespace

std::string groupContext(const std::vector<int>& worldRanks) {
  if (isWorldOrder(worldRanks))
    return "";
  std::string members;
  for (size_t i = 0; i < worldRanks.size() && i < kMembersShown; ++i) {
    members += concat(i == 0 ? "" : ", ", worldRanks[i]);
  }
  if (worldRanks.size() > kMembersShown)
    members += concat(", … (", worldRanks.size(), " in all)");
  return concat("in the group of world ranks [", members, "]: ");
}

}  // namespace chorus::detail
