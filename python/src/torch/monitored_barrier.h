// torch.distributed.monitored_barrier for the chorus torch.distributed backend: a barrier that,
// instead of waiting up to the group's timeout, says which ranks did not reach it within the
// call's own timeout.
//
// Contract:
//  - One MonitoredBarrier per process group. `store` is one every member shares (torch's store of
//    its default group: ProcessGroupChorus::over); the keys live there under `name`, which must be
//    the same on every member of the group and differ from every other group's.
//  - run(rank, size, timeout, groupTimeout, waitAllRanks) returns on every rank once all have
//    called it: rank 0 heard from every other rank within `timeout` of its own call, and told
//    each so. `timeout` c10d::kUnsetTimeout means the group's timeout.
//  - Rank 0 hears from ranks 1, 2, ... in order. The first it does not hear from in time is named
//    in torch's error, "Rank r failed to pass monitoredBarrier in T ms"; with waitAllRanks it
//    waits out the timeout for every rank and names all those missing ("Ranks 1, 3 failed ...").
//    Where the timeout is spent before a rank that has not arrived yet, the error is "Rank 0
//    timed out in monitoredBarrier after T ms", naming the ranks heard from. These are gloo's
//    messages, which torch's tests and users' log searches look for.
//  - Rank 0 hands its verdict to every rank, failure included, so that the others fail at once
//    with "Rank r successfully reached monitoredBarrier, but received errors while waiting for
//    send/recv from rank 0", followed by rank 0's message. A rank that hears no verdict within
//    the longer of `timeout` and `groupTimeout` fails the same way, saying so.
//  - Its messages go through the store, not the group's communicator: an operation the group has
//    in flight (stuck on the very rank that is late) holds nothing back, and a failure leaves
//    nothing posted on the group. Each call has keys of its own (the group's calls are counted);
//    they stay in the store, a few bytes a call. Waits on the store come in slices of 100 ms or
//    less, so that others' use of the same store client is never held up for long.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace chorus::torch_backend {

class MonitoredBarrier {
 public:
  MonitoredBarrier(c10::intrusive_ptr<c10d::Store> store, std::string name);

  void run(int rank,
           int size,
           std::chrono::milliseconds timeout,
           std::chrono::milliseconds groupTimeout,
           bool waitAllRanks);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string name_;
  uint64_t calls_ = 0;
};

}  // namespace chorus::torch_backend
