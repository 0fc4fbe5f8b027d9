// StoreCensus: arrival notes in the store. See arrival_census.h.
#include "runtime/arrival_census.h"

#include <cstring>

#include "core/check.h"
#include "core/logging.h"

namespace chorus::detail {

std::string StoreCensus::key(int rank) const { return concat("chorus/census/", scope_, "/", rank); }

std::string StoreCensus::callKey(int rank) const {
  return concat("chorus/census/", scope_, "/call/", rank);
}

void StoreCensus::noteArrived() noexcept {
  try {
    // The call first: a rank that sees the arrival may look for it at once.
    const auto* bytes = reinterpret_cast<const uint8_t*>(&fingerprint_);
    store_.set(callKey(rank_), store::Bytes(bytes, bytes + sizeof fingerprint_));
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

void StoreCensus::checkAgreement() {
  for (int rank = 0; rank < size_; ++rank) {
    transport::Fingerprint theirs;
    try {
      if (rank == rank_ || !store_.check({callKey(rank)}))
        continue;
      const store::Bytes noted =
          store_.get(callKey(rank), Deadline::after(std::chrono::seconds(1)));
      if (noted.size() != sizeof theirs)
        continue;
      std::memcpy(&theirs, noted.data(), sizeof theirs);
    } catch (const std::exception& e) {
      CHORUS_LOG(kDebug) << "could not read rank " << rank
                         << "'s call from the store: " << e.what();
      continue;
    }
    // A note of an earlier or a later collective says nothing about this one.
    if (theirs.sequence == sequence_ && !fingerprint_.firstDifference(theirs).empty())
      throw transport::makeMismatchError(rank_, rank, fingerprint_, theirs);
  }
}

}  // namespace chorus::detail
