#include "monitored_barrier.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "torch_tensors.h"

namespace chorus::torch_backend {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text.empty() ? "none" : text;
}

// Whether `work` completed within `timeout`; a failed one (a dead peer) counts as not arrived.
bool arrivedWithin(const Communicator::WorkPtr& work, milliseconds timeout) {
  try {
    return work->waitFor(std::max(timeout, milliseconds(0))) && work->exception() == nullptr;
  } catch (...) {
    return false;
  }
}

using Kept = std::vector<std::shared_ptr<void>>;

// A byte of host memory that stays alive in `kept` (until the communicator is gone) in case the
// message into or out of it is left unanswered by a failure.
uint8_t* keptByte(Kept& kept, uint8_t value) {
  auto byte = std::make_shared<uint8_t>(value);
  kept.push_back(byte);
  return byte.get();
}

void hearFromEveryRank(Communicator& comm, milliseconds timeout, bool waitAllRanks, Kept& kept) {
  const auto start = Clock::now();
  auto remaining = [&] {
    return timeout - std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  };
  std::vector<Communicator::WorkPtr> works(comm.size());
  for (int r = 1; r < comm.size(); ++r)
    works[r] = comm.recv(Tensor(keptByte(kept, 0), {1}), r, kMonitoredBarrierTag);
  std::vector<int> heard, missing;
  for (int r = 1; r < comm.size(); ++r) {
    if (!waitAllRanks && remaining() <= milliseconds(0) && !works[r]->isCompleted()) {
      throwTorchError("Rank 0 timed out in monitoredBarrier after " +
                      std::to_string(timeout.count()) + " ms; heard from ranks " + joined(heard) +
                      ", not yet from rank " + std::to_string(r));
    }
    if (arrivedWithin(works[r], remaining())) {
      heard.push_back(r);
      continue;
    }
    missing.push_back(r);
    if (!waitAllRanks)
      break;
  }
  if (!missing.empty()) {
    throwTorchError((missing.size() == 1 ? "Rank " : "Ranks ") + joined(missing) +
                    " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                    " ms (chorus: no message from " + (missing.size() == 1 ? "it" : "them") +
                    " on group rank 0 within the timeout)");
  }
  std::vector<Communicator::WorkPtr> answers;
  for (int r = 1; r < comm.size(); ++r)
    answers.push_back(comm.send(Tensor(keptByte(kept, 1), {1}), r, kMonitoredBarrierTag));
  for (const auto& work : answers) work->wait();
  kept.clear();  // every message was answered
}

void reachRankZero(Communicator& comm, milliseconds timeout, Kept& kept) {
  auto sent = comm.send(Tensor(keptByte(kept, 1), {1}), 0, kMonitoredBarrierTag);
  auto answered = comm.recv(Tensor(keptByte(kept, 0), {1}), 0, kMonitoredBarrierTag);
  if (!arrivedWithin(answered, timeout)) {
    throwTorchError("Rank " + std::to_string(comm.rank()) +
                    " successfully reached monitoredBarrier, but received errors while waiting "
                    "for send/recv from rank 0. Please check rank 0 logs for faulty rank (chorus: "
                    "no answer from group rank 0 within " +
                    std::to_string(timeout.count()) + " ms)");
  }
  sent->wait();
  kept.clear();
}

}  // namespace

void MonitoredBarrier::run(Communicator& comm, milliseconds timeout, bool waitAllRanks) {
  if (comm.size() == 1)
    return;
  Kept kept;
  try {
    if (comm.rank() == 0)
      hearFromEveryRank(comm, timeout, waitAllRanks, kept);
    else
      reachRankZero(comm, timeout, kept);
  } catch (...) {
    unanswered_.insert(unanswered_.end(), kept.begin(), kept.end());
    throw;
  }
}

}  // namespace chorus::torch_backend
