#include "monitored_barrier.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "torch_tensors.h"

namespace chorus::torch_backend {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::string kPassed = "passed";

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text.empty() ? "none" : text;
}

// Whether `key` is in `store` within `timeout`. It waits in slices of at most 100 ms, looking
// first each time: a store client serves one request at a time, so one long wait would hold up
// every other use of it in the process (chorus's world, torch's), and a short one can expire on a
// key that is there while the reply is on its way.
bool appearsWithin(c10d::Store& store, const std::string& key, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (store.check({key}))
      return true;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left <= milliseconds(0))
      return false;
    try {
      store.wait({key}, std::clamp(left, milliseconds(1), milliseconds(100)));
    } catch (const std::exception&) {  // the slice expired: look again
    }
  }
}

std::vector<uint8_t> asBytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

MonitoredBarrier::MonitoredBarrier(c10::intrusive_ptr<c10d::Store> store, std::string name)
    : store_(std::move(store)), name_(std::move(name)) {}

void MonitoredBarrier::run(
    int rank, int size, milliseconds timeout, milliseconds groupTimeout, bool waitAllRanks) {
  if (timeout == c10d::kUnsetTimeout)
    timeout = groupTimeout;
  const std::string call = name_ + "/" + std::to_string(calls_++) + "/";
  if (size == 1)
    return;
  const std::string verdictKey = call + "verdict";
  const std::string ms = std::to_string(timeout.count()) + " ms";
  if (rank != 0) {
    store_->set(call + "arrived/" + std::to_string(rank), asBytes("1"));
    const std::string reached = "Rank " + std::to_string(rank) +
                                " successfully reached monitoredBarrier, but received errors "
                                "while waiting for send/recv from rank 0";
    if (!appearsWithin(*store_, verdictKey, std::max(timeout, groupTimeout))) {
      throwTorchError(reached + " (chorus: no word from group rank 0 within " +
                      std::to_string(std::max(timeout, groupTimeout).count()) +
                      " ms; did it reach the barrier?)");
    }
    const std::vector<uint8_t> verdict = store_->get(verdictKey);
    if (std::string(verdict.begin(), verdict.end()) != kPassed)
      throwTorchError(reached + ". Rank 0 says: " + std::string(verdict.begin(), verdict.end()));
    return;
  }
  const auto start = Clock::now();
  auto remaining = [&] {
    return timeout - std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  };
  std::vector<int> heard, missing;
  std::string failure;
  for (int r = 1; r < size && failure.empty(); ++r) {
    const std::string arrived = call + "arrived/" + std::to_string(r);
    const bool hadTime = remaining() > milliseconds(0);
    if (appearsWithin(*store_, arrived, remaining())) {  // it looks once even with no time left
      heard.push_back(r);
    } else if (waitAllRanks) {
      missing.push_back(r);
    } else if (hadTime) {
      failure = "Rank " + std::to_string(r) + " failed to pass monitoredBarrier in " + ms;
    } else {
      failure = "Rank 0 timed out in monitoredBarrier after " + ms + "; heard from ranks " +
                joined(heard) + ", not yet from rank " + std::to_string(r);
    }
  }
  if (failure.empty() && !missing.empty()) {
    failure = std::string(missing.size() == 1 ? "Rank " : "Ranks ") + joined(missing) +
              " failed to pass monitoredBarrier in " + ms;
  }
  store_->set(verdictKey, asBytes(failure.empty() ? kPassed : failure));
  if (!failure.empty())
    throwTorchError(failure);
}

}  // namespace chorus::torch_backend
