// The launcher's record of a failed rank: see rank_failure.h.
#include "store/rank_failure.h"

#include <cstdlib>

#include "chorus/error.h"

namespace chorus::store {

void recordRankFailure(Store& store, const RankFailure& failure) {
  store.compareSet(kFailedRankKey, {}, toBytes(std::to_string(failure.rank) + " " + failure.what));
}

namespace {
std::string earlyExitKey(int rank) { return "job/exited/" + std::to_string(rank); }
}  // namespace

void recordEarlyExit(Store& store, int rank, const std::string& what) {
  store.set(earlyExitKey(rank), toBytes(what));
}

std::optional<std::string> recordedEarlyExit(Store& store, int rank) {
  if (!store.check({earlyExitKey(rank)}))
    return std::nullopt;
  return toString(store.get(earlyExitKey(rank), Deadline::never()));
}

std::optional<RankFailure> recordedRankFailure(Store& store, Deadline deadline) {
  if (!store.check({kFailedRankKey})) {
    if (deadline.expired())
      return std::nullopt;
    try {
      store.wait({kFailedRankKey}, deadline);
    } catch (const TimeoutError&) {
      return std::nullopt;
    }
  }
  const std::string value = toString(store.get(kFailedRankKey, Deadline::never()));
  char* end = nullptr;
  const long rank = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != ' ')
    return RankFailure{-1, value};  // not written by chorusrun: quote it as it is
  return RankFailure{static_cast<int>(rank), std::string(end + 1)};
}

}  // namespace chorus::store
