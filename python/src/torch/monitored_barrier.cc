#include "monitored_barrier.h"

#include <algorithm>
#include <exception>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
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

// The store under torch's per-group prefixes, which are group names that need not agree across
// ranks (torch_module.cc).
c10::intrusive_ptr<c10d::Store> unprefixed(c10::intrusive_ptr<c10d::Store> store) {
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get()))
    store = prefixed->getUnderlyingStore();
  return store;
}

// Whether `key` is in `store` within `timeout` (at least a millisecond: c10d reads 0 as none).
bool appearsWithin(c10d::Store& store, const std::string& key, milliseconds timeout) {
  try {
    store.wait({key}, std::max(timeout, milliseconds(1)));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<uint8_t> asBytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

MonitoredBarrier::MonitoredBarrier(c10::intrusive_ptr<c10d::Store> store, std::string name)
    : store_(unprefixed(std::move(store))), name_(std::move(name)) {}

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
    if (!waitAllRanks && remaining() <= milliseconds(0) && !store_->check({arrived})) {
      failure = "Rank 0 timed out in monitoredBarrier after " + ms + "; heard from ranks " +
                joined(heard) + ", not yet from rank " + std::to_string(r);
    } else if (appearsWithin(*store_, arrived, remaining())) {
      heard.push_back(r);
    } else {
      missing.push_back(r);
      if (!waitAllRanks)
        break;
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
