// The errors of a sub-communicator in world ranks: see world_rank_errors.h.
#include "runtime/world_rank_errors.h"

#include <string>

#include "core/check.h"
#include "core/error_ranks.h"

namespace chorus::detail {
namespace {

bool isWorldOrder(const std::vector<int>& worldRanks) {
  for (size_t i = 0; i < worldRanks.size(); ++i) {
    if (worldRanks[i] != static_cast<int>(i))
      return false;
  }
  return true;
}

// Members shown in the map; a larger group's list ends in "…" (its fields are still translated).
constexpr size_t kMembersShown = 16;

std::string prefixFor(const std::vector<int>& worldRanks, int rank) {
  std::string members;
  std::string numbers;
  for (size_t i = 0; i < worldRanks.size() && i < kMembersShown; ++i) {
    members += concat(i == 0 ? "" : ", ", worldRanks[i]);
    numbers += concat(i == 0 ? "" : ", ", i);
  }
  if (worldRanks.size() > kMembersShown) {
    members += concat(", … (", worldRanks.size(), " in all)");
    numbers += ", …";
  }
  const bool member = rank >= 0 && rank < static_cast<int>(worldRanks.size());
  return concat("world rank ", member ? worldRanks[rank] : rank,
                " (this process), in the group of world ranks [", members, "] (numbered ", numbers,
                " below): ");
}

}  // namespace

std::exception_ptr inWorldRanks(std::exception_ptr error,
                                const std::vector<int>& worldRanks,
                                int rank) noexcept {
  if (!error || isWorldOrder(worldRanks))
    return error;
  try {
    return withRanksMapped(error, worldRanks, prefixFor(worldRanks, rank));
  } catch (...) {
    return error;  // out of memory for the prefix
  }
}

}  // namespace chorus::detail
