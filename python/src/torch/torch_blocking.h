// The chorus torch.distributed backend: the calls torch waits for at once run as chorus's
// blocking calls.
//
// Contract:
//  - callerWaitsAtOnce(opts): whether torch's options say the call is not asynchronous. torch >=
//    2.7 has `asyncOp` in its options, false for a call without async_op=True: torch then waits
//    for the work before it returns to Python, and on CUDA it wants the collective on the current
//    stream. Options without that member (torch 1.13's, and those of calls torch never marks) give
//    false: the work may be waited for later, so it goes to the communicator's worker.
//  - BlockingIfCallerWaits(opts): while it lives, the operations this thread issues are chorus
//    blocking calls (chorus::BlockingCalls) exactly when callerWaitsAtOnce(opts). One issued while
//    its communicator is idle then runs on this thread, with no hand-off to the worker thread and
//    back (about 20 us a call on two loaded cores), and a CUDA one runs on the caller's stream.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "chorus/communicator.h"

namespace chorus::torch_backend {

template <typename Options, typename = void>
struct HasAsyncOp : std::false_type {};
template <typename Options>
struct HasAsyncOp<Options, std::void_t<decltype(std::declval<const Options&>().asyncOp)>>
    : std::true_type {};

template <typename Options>
bool callerWaitsAtOnce(const Options& opts) {
  if constexpr (HasAsyncOp<Options>::value)
    return !opts.asyncOp;
  else
    return false;
}

class BlockingIfCallerWaits {
 public:
  template <typename Options>
  explicit BlockingIfCallerWaits(const Options& opts) {
    if (callerWaitsAtOnce(opts))
      scope_.emplace();
  }

 private:
  std::optional<BlockingCalls> scope_;
};

}  // namespace chorus::torch_backend
