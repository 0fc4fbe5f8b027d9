// StoreCensus: arrival notes in the store. See arrival_census.h.
#include "runtime/arrival_census.h"

#include "core/check.h"
#include "core/logging.h"

namespace chorus::detail {

std::string StoreCensus::key(int rank) const { return concat("chorus/census/", scope_, "/", rank); }

void StoreCensus::noteArrived() noexcept {
  try {
    const std::string mine = key(rank_);
    const int64_t noted = store_.add(mine, 0);
    if (noted < static_cast<int64_t>(sequence_))
      store_.add(mine, static_cast<int64_t>(sequence_) - noted);
  } catch (const std::exception& e) {
    CHORUS_LOG(kDebug) << "could not note this rank's arrival in the store: " << e.what();
  }
}

std::vector<int> StoreCensus::missing() noexcept {
  std::vector<int> missing;
  try {
    for (int rank = 0; rank < size_; ++rank) {
      if (rank != rank_ && store_.add(key(rank), 0) < static_cast<int64_t>(sequence_))
        missing.push_back(rank);
    }
  } catch (const std::exception& e) {
    CHORUS_LOG(kDebug) << "could not read the arrival census from the store: " << e.what();
    missing.clear();
  }
  return missing;
}

}  // namespace chorus::detail
