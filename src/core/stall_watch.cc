// The stall inspector's thread-local operation and its one-time warning. See Note [Stall
// inspector] (stall_watch.h).
#include "core/stall_watch.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <vector>

#include "core/check.h"
#include "core/env.h"
#include "core/logging.h"

namespace chorus::stall {
namespace {

thread_local OperationScope* current = nullptr;
std::atomic<StallListener> stallListener{nullptr};

std::string formatSeconds(Clock::duration elapsed) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(elapsed).count());
  return text;
}

}  // namespace

OperationScope::OperationScope(int rank,
                               Clock::time_point startedAt,
                               std::chrono::milliseconds timeout,
                               Describe describe,
                               const void* subject,
                               Census* census)
    : rank_(rank),
      startedAt_(startedAt),
      describe_(describe),
      subject_(subject),
      census_(census),
      noteAt_(census == nullptr ? Clock::time_point::max()
                                : startedAt + std::min(kNoteAfter, timeout / 4)),
      compareAt_(Clock::time_point::max()),
      compareAfter_(kCompareFirst),
      reportAt_(stallWarnAfter().count() > 0 ? startedAt + stallWarnAfter()
                                             : Clock::time_point::max()),
      outer_(current) {
  current = this;
}

OperationScope::~OperationScope() { current = outer_; }

std::chrono::milliseconds stallWarnAfter() {
  static const std::chrono::milliseconds after = [] {
    std::optional<std::chrono::milliseconds> value = env::seconds("CHORUS_STALL_WARN");
    return value.value_or(std::chrono::seconds(60));
  }();
  return after;
}

Clock::time_point nextCheckAt() {
  if (current == nullptr)
    return Clock::time_point::max();
  return std::min({current->noteAt_, current->compareAt_, current->reportAt_});
}

void onStalled(std::span<const int> waitingOn) {
  if (current == nullptr)
    return;
  const Clock::time_point now = Clock::now();
  if (now >= current->noteAt_) {
    current->noteAt_ = Clock::time_point::max();
    current->census_->noteArrived();
    current->compareAt_ = now + current->compareAfter_;
  }
  if (now >= current->compareAt_) {
    current->compareAfter_ = std::min(2 * current->compareAfter_, kCompareAtMost);
    current->compareAt_ = now + current->compareAfter_;
    current->census_->checkAgreement();
  }
  if (now < current->reportAt_)
    return;
  current->reportAt_ = Clock::time_point::max();
  try {
    std::vector<int> ranks = missingRanks({waitingOn.begin(), waitingOn.end()});
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    std::string names;
    for (int rank : ranks) names += detail::concat(names.empty() ? "" : ", ", rank);
    const std::string warning = detail::concat(
        "rank ", current->rank_, " (this process): ", current->describe_(current->subject_),
        " has waited ", formatSeconds(Clock::now() - current->startedAt_), "; still waiting for ",
        ranks.size() == 1 ? "rank " : "ranks ", names.empty() ? "(unknown)" : names,
        " (CHORUS_STALL_WARN=", std::chrono::duration<double>(stallWarnAfter()).count(), ")");
    CHORUS_LOG(kWarn) << warning;
    if (StallListener listener = stallListener.load())
      listener(warning);
  } catch (...) {
    // Logging is best effort; the operation goes on waiting either way.
  }
}

void setStallListener(StallListener listener) { stallListener.store(listener); }

std::vector<int> missingRanks(std::vector<int> waitingOn) {
  if (current != nullptr && current->census_ != nullptr) {
    std::vector<int> missing = current->census_->missing();
    if (!missing.empty())
      return missing;
  }
  return waitingOn;
}

std::string describeTimeout() {
  if (current == nullptr)
    return {};
  return current->describe_(current->subject_) + " timed out after " +
         formatSeconds(Clock::now() - current->startedAt_);
}

}  // namespace chorus::stall
