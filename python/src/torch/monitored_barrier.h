// torch.distributed.monitored_barrier on a chorus communicator: a barrier that, instead of waiting
// up to the group's timeout, says which ranks did not reach it within the call's own timeout.
//
// Contract:
//  - MonitoredBarrier::run(comm, timeout, waitAllRanks) returns on every rank once all have called
//  it
//    (rank 0 heard from every other rank, within `timeout` of its call, and answered each).
//  - Rank 0 hears from ranks 1, 2, ... in order. The first one it does not hear from in time is
//    named in torch's error, "Rank r failed to pass monitoredBarrier in T ms"; with waitAllRanks
//    it waits the whole timeout for every rank and names all those missing ("Ranks 1, 3 failed
//    ..."). Where the timeout is already spent before a rank that has not arrived, the error is
//    "Rank 0 timed out in monitoredBarrier after T ms", naming the ranks heard from. Ranks that did
//    call but hear no answer within `timeout` fail with "Rank r successfully reached
//    monitoredBarrier, but received errors while waiting for send/recv from rank 0". These are
//    gloo's messages, which torch's tests and users' log searches look for.
//  - Its messages travel as point-to-point messages of kMonitoredBarrierTag on `comm`: a program's
//    own send/recv must not use that tag on the same group. After a failure the unanswered
//    messages stay posted (a late rank's arrival completes them), so the group's later
//    operations wait for them, as after any failed point-to-point exchange; the MonitoredBarrier
//    keeps their buffers, so it must outlive `comm`'s operations (declare it before the
//    communicator it serves).
//  - Host memory only (a byte per message), whatever device the group's tensors are on.
#pragma once

#include <chrono>
#include <limits>
#include <memory>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::torch_backend {

inline constexpr int kMonitoredBarrierTag = std::numeric_limits<int>::max();

class MonitoredBarrier {
 public:
  void run(Communicator& comm, std::chrono::milliseconds timeout, bool waitAllRanks);

 private:
  std::vector<std::shared_ptr<void>> unanswered_;  // buffers of messages a failure left posted
};

}  // namespace chorus::torch_backend
