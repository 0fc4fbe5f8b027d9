// StoreCensus: arrival notes in the store. See arrival_census.h.
#include "runtime/arrival_census.h"

#include <cstring>
#include <functional>
#include <string_view>

#include "core/check.h"
#include "core/logging.h"

namespace chorus::detail {

std::string StoreCensus::key(int rank) const { return concat("chorus/census/", scope_, "/", rank); }

std::string StoreCensus::callKey(int rank) const {
  return concat("chorus/census/", scope_, "/call/", rank);
}

std::string StoreCensus::callCountKey(bool thisCall) const {
  if (!thisCall)
    return concat("chorus/census/", scope_, "/calls/", sequence_);
  const std::string_view bytes(reinterpret_cast<const char*>(&fingerprint_), sizeof fingerprint_);
  return concat("chorus/census/", scope_, "/calls/", sequence_, "/",
                std::hash<std::string_view>{}(bytes));
}

void StoreCensus::noteArrived() noexcept {
  try {
    // The call, then its count, then the total (see the header): a rank that sees a count may
    // look for the call at once.
    const auto* bytes = reinterpret_cast<const uint8_t*>(&fingerprint_);
    store_.set(callKey(rank_), store::Bytes(bytes, bytes + sizeof fingerprint_));
    store_.add(callCountKey(true), 1);
    store_.add(callCountKey(false), 1);
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
        missing.push_back(names_(rank));
    }
  } catch (const std::exception& e) {
    CHORUS_LOG(kDebug) << "could not read the arrival census from the store: " << e.what();
    missing.clear();
  }
  return missing;
}

void StoreCensus::checkAgreement() {
  try {
    const int64_t noted = store_.add(callCountKey(false), 0);
    if (noted <= store_.add(callCountKey(true), 0))
      return;  // every rank that noted this collective called it as this rank did
  } catch (const std::exception& e) {
    CHORUS_LOG(kDebug) << "could not read the census's call counts from the store: " << e.what();
    return;
  }
  if (auto different = findDifferentCall())
    throw makeMismatchError(names_(rank_), names_(different->first), fingerprint_,
                            different->second);
}

std::optional<std::pair<int, Fingerprint>> StoreCensus::findDifferentCall() {
  for (int rank = 0; rank < size_; ++rank) {
    Fingerprint theirs;
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
      return std::make_pair(rank, theirs);
  }
  return std::nullopt;  // that rank has gone on (it failed): its own error will say why
}

}  // namespace chorus::detail
