// The errors of a sub-communicator in world ranks: see world_rank_errors.h.
#include "runtime/world_rank_errors.h"

#include <string>

#include "chorus/error.h"
#include "core/check.h"
#include "core/error_codec.h"

namespace chorus::detail {
namespace {

bool isWorldOrder(const std::vector<int>& worldRanks) {
  for (size_t i = 0; i < worldRanks.size(); ++i) {
    if (worldRanks[i] != static_cast<int>(i))
      return false;
  }
  return true;
}

// A member index as a world rank; -1 (no rank) and out-of-range values stay as they are.
int toWorld(int member, const std::vector<int>& worldRanks) {
  return member >= 0 && member < static_cast<int>(worldRanks.size()) ? worldRanks[member] : member;
}

std::vector<int> toWorld(const std::vector<int>& members, const std::vector<int>& worldRanks) {
  std::vector<int> world;
  world.reserve(members.size());
  for (int member : members) world.push_back(toWorld(member, worldRanks));
  return world;
}

std::string prefixFor(const std::vector<int>& worldRanks, int rank) {
  std::string members;
  std::string numbers;
  for (size_t i = 0; i < worldRanks.size(); ++i) {
    members += concat(i == 0 ? "" : ", ", worldRanks[i]);
    numbers += concat(i == 0 ? "" : ", ", i);
  }
  return concat("world rank ", toWorld(rank, worldRanks),
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
    const std::string prefix = prefixFor(worldRanks, rank);
    try {
      std::rethrow_exception(error);
    } catch (const PeerError& e) {
      return std::make_exception_ptr(
          PeerError(prefix + e.what(), toWorld(e.peerRank(), worldRanks)));
    } catch (const TimeoutError& e) {
      return std::make_exception_ptr(
          TimeoutError(prefix + e.what(), toWorld(e.missingRanks(), worldRanks)));
    } catch (const MismatchError& e) {
      return std::make_exception_ptr(
          MismatchError(prefix + e.what(), e.field(), toWorld(e.ranks(), worldRanks)));
    } catch (const Error&) {
      // Names no rank in its fields: the same type, with the map in front of its message.
      return decodeError(encodeError(error), prefix, -1);
    }
  } catch (...) {
    // Not a chorus error (the front end turns those into InternalError), or out of memory.
  }
  return error;
}

}  // namespace chorus::detail
