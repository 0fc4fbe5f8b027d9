// The watchdog of a communicator's CUDA collectives: see device_watchdog.h.
#include "runtime/device_watchdog.h"

#include "chorus/error.h"
#include "core/check.h"
#include "store/rank_failure.h"

namespace chorus::detail {
namespace {

bool checkPassed(const std::shared_ptr<Work>& check) {
  return check == nullptr || (check->isCompleted() && check->exception() == nullptr);
}

// Whether `error` already says what went wrong and who is to blame.
bool explained(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerError& e) {
    return e.peerRank() >= 0;
  } catch (const MismatchError&) {
    return true;
  } catch (const TimeoutError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

std::exception_ptr nameFailedRank(std::exception_ptr seen,
                                  store::Store* jobStore,
                                  int worldRank,
                                  const Fingerprint& fingerprint,
                                  Deadline wait) {
  if (jobStore == nullptr || explained(seen))
    return seen;
  std::optional<store::RankFailure> record;
  try {
    record = store::recordedRankFailure(*jobStore, wait);
  } catch (const Error&) {
    return seen;  // no store to ask (the launcher is gone)
  }
  if (!record)
    return seen;
  return std::make_exception_ptr(
      PeerError(concat("rank ", worldRank, " (this process): ", record->what,
                       " (chorusrun saw it) while this rank's ", fingerprint.describe(),
                       " was running on the GPU; this communicator was aborted"),
                record->rank));
}

DeviceWatchdog::DeviceWatchdog(int worldRank, std::shared_ptr<store::Store> jobStore, Fail fail)
    : worldRank_(worldRank), jobStore_(std::move(jobStore)), fail_(std::move(fail)) {
  thread_ = std::thread([this] { run(); });
}

DeviceWatchdog::~DeviceWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void DeviceWatchdog::watch(std::shared_ptr<backend::DeviceCompletion> completion,
                           std::shared_ptr<Work> check,
                           const Fingerprint& fingerprint,
                           Deadline deadline,
                           trace::Ticket ticket) {
  bool wasIdle = false;
  {
    std::lock_guard lock(mutex_);
    if (failed_)
      return;  // the communicator failed: every call raises from now on
    wasIdle = watched_.empty();
    watched_.push_back({std::move(completion), std::move(check), fingerprint, deadline, ticket});
  }
  // Only an idle thread sleeps until told; a busy one looks again within kPollInterval. So a
  // stream of calls costs one lock each, not a wake-up each.
  if (wasIdle)
    wake_.notify_all();
}

void DeviceWatchdog::run() {
  std::unique_lock lock(mutex_);
  Clock::time_point nextStoreRead = Clock::now();
  while (!stopping_) {
    if (watched_.empty() || failed_) {
      wake_.wait(lock, [&] { return stopping_ || (!watched_.empty() && !failed_); });
      continue;
    }
    lock.unlock();
    const bool readStore = jobStore_ != nullptr && Clock::now() >= nextStoreRead;
    if (readStore)
      nextStoreRead = Clock::now() + kStoreInterval;
    std::exception_ptr failure = inspect(readStore);
    lock.lock();
    if (failure && !stopping_) {
      failed_ = true;
      for (const Watched& watched : watched_) trace::end(watched.ticket, /*failed=*/true);
      watched_.clear();
      lock.unlock();
      fail_(failure);
      lock.lock();
      continue;
    }
    wake_.wait_for(lock, kPollInterval, [&] { return stopping_; });
  }
}

size_t DeviceWatchdog::endedPrefix(size_t count, const std::function<bool(size_t)>& ended) {
  size_t known = 0;        // [0, known) ended
  size_t unknown = count;  // [unknown, count) did not
  try {
    while (known < unknown) {
      const size_t middle = known + (unknown - known) / 2;
      if (ended(middle))
        known = middle + 1;
      else
        unknown = middle;
    }
  } catch (...) {
  }
  return known;
}

void DeviceWatchdog::popEndedPrefix() {
  // The communicator's device calls are ordered one after another on the GPU (on its stream, or
  // a blocking call's on the caller's, each after the previous call's end; Note [Blocking calls
  // on the caller's stream]), so its completions end in the order they were watched: the ended
  // ones are a prefix of watched_. A binary search finds its end with
  // O(log n) queries, where asking each would make one CUDA call per collective, each contending
  // for the driver's lock with the thread that enqueues. Only this thread removes entries, so
  // indices below the size read here stay valid while watch() appends. A query that throws stops
  // the search: inspect() then meets that failure in order and explains it.
  size_t count = 0;
  {
    std::lock_guard lock(mutex_);
    count = watched_.size();
  }
  const size_t ended = endedPrefix(count, [this](size_t i) {
    std::shared_ptr<backend::DeviceCompletion> completion;
    {
      std::lock_guard lock(mutex_);
      completion = watched_[i].completion;
    }
    return completion->isCompleted();
  });
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < ended && !watched_.empty(); ++i) {
    trace::end(watched_.front().ticket, /*failed=*/false);
    watched_.pop_front();
  }
}

std::exception_ptr DeviceWatchdog::inspect(bool readStore) {
  popEndedPrefix();
  for (;;) {
    Watched oldest;
    {
      std::lock_guard lock(mutex_);
      if (watched_.empty())
        return nullptr;
      oldest = watched_.front();
    }
    bool ended = false;
    try {
      ended = oldest.completion->isCompleted();
    } catch (...) {
      // NCCL's or CUDA's own error is often a peer's death, which the launcher names.
      return nameFailedRank(std::current_exception(), jobStore_.get(), worldRank_,
                            oldest.fingerprint, Deadline::after(kRecordGrace));
    }
    if (!ended) {
      if (readStore) {
        // A rank that died where no connection of this process closes: only the launcher saw it.
        std::exception_ptr unnamed = std::make_exception_ptr(PeerError("", -1));
        std::exception_ptr named = nameFailedRank(unnamed, jobStore_.get(), worldRank_,
                                                  oldest.fingerprint, Deadline::after({}));
        if (named != unnamed)
          return named;
      }
      if (oldest.deadline.expired() && checkPassed(oldest.check))
        return timedOut(oldest);
      return nullptr;
    }
    trace::end(oldest.ticket, /*failed=*/false);
    std::lock_guard lock(mutex_);
    if (!watched_.empty() && watched_.front().completion == oldest.completion)
      watched_.pop_front();
  }
}

std::exception_ptr DeviceWatchdog::timedOut(const Watched& oldest) const {
  return std::make_exception_ptr(TimeoutError(concat(
      "rank ", worldRank_, " (this process): ", oldest.fingerprint.describe(),
      " did not finish on the GPU by its deadline (CHORUS_TIMEOUT), although every rank of the "
      "communicator called it (the host check passed): the GPU work is stuck (a peer's GPU may be "
      "hung, or NCCL cannot reach it; NCCL_DEBUG=INFO says more). This communicator was "
      "aborted")));
}

}  // namespace chorus::detail
