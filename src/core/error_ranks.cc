// Errors in the caller's numbering: see error_ranks.h.
#include "core/error_ranks.h"

#include "chorus/error.h"
#include "core/error_codec.h"

namespace chorus::detail {
namespace {

int mapped(int rank, const std::vector<int>& map) {
  return rank >= 0 && rank < static_cast<int>(map.size()) ? map[rank] : rank;
}

std::vector<int> mapped(const std::vector<int>& ranks, const std::vector<int>& map) {
  std::vector<int> result;
  result.reserve(ranks.size());
  for (int rank : ranks) result.push_back(mapped(rank, map));
  return result;
}

}  // namespace

std::exception_ptr withRanksMapped(std::exception_ptr error,
                                   const std::vector<int>& map,
                                   const std::string& prefix) noexcept {
  if (!error)
    return error;
  try {
    try {
      std::rethrow_exception(error);
    } catch (const PeerError& e) {
      return std::make_exception_ptr(PeerError(prefix + e.what(), mapped(e.peerRank(), map)));
    } catch (const TimeoutError& e) {
      return std::make_exception_ptr(
          TimeoutError(prefix + e.what(), mapped(e.missingRanks(), map)));
    } catch (const MismatchError& e) {
      return std::make_exception_ptr(
          MismatchError(prefix + e.what(), e.field(), mapped(e.ranks(), map)));
    } catch (const Error&) {
      // Names no rank in its fields: the same type, with the prefix in front of its message.
      return decodeError(encodeError(error), prefix, -1);
    }
  } catch (...) {
    // Not a chorus error, or out of memory: as it is.
  }
  return error;
}

}  // namespace chorus::detail
