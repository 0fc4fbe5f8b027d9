// parallel/wait_all.h — waiting for a batch of operations in flight (gradient buckets, unit
// reductions, allgathers).
//
// Contract: waitAll() waits for every work, even after one has failed (their buffers must not be
// touched until all are done), clears the list, then rethrows the first failure, if any.
#pragma once

#include <exception>
#include <memory>
#include <vector>

#include "chorus/work.h"

namespace chorus::parallel {

inline void waitAll(std::vector<std::shared_ptr<Work>>& works) {
  std::exception_ptr failure;
  for (auto& work : works) {
    try {
      work->wait();
    } catch (const std::exception&) {
      if (!failure)
        failure = std::current_exception();
    }
  }
  works.clear();
  if (failure)
    std::rethrow_exception(failure);
}

}  // namespace chorus::parallel
