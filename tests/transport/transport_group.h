// Helpers for transport tests: make a connected group of any kind (loopback, tcp over 127.0.0.1
// or shm, with an in-process store), play a crash, and run one thread per rank with a limit
// after which every transport is aborted (so a broken transport fails the test, never hangs it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport::testing {

using Group = std::vector<std::unique_ptr<Transport>>;

// kind: "loopback", "loopback_rendezvous", "tcp" or "shm". Fails (throws) rather than hangs if the
// group cannot form.
Group makeGroup(const std::string& kind, int size);
// Leaves without goodbye, as a killed process would.
void crash(Transport& transport);

// Runs body(transport) on one thread per rank; returns each rank's exception (null: none). If the
// ranks are not done within `limit`, adds a test failure and aborts every transport. The limit
// guards against hangs, not slowness: under ThreadSanitizer on a loaded 2-core machine the
// largest-message shm test took over 20 s.
std::vector<std::exception_ptr> runRanks(
    Group& group,
    const std::function<void(Transport&)>& body,
    std::chrono::milliseconds limit = std::chrono::seconds(90));

// A one-shot signal between rank threads whose wait gives up (throws) after a limit.
class Signal {
 public:
  void set();
  // Throws std::runtime_error after `limit`.
  void wait(std::chrono::milliseconds limit = std::chrono::seconds(10));

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool set_ = false;
};

// A fingerprint for tests: allreduce #sequence of `count` float32 with sum.
Fingerprint stamp(uint64_t sequence = 1, uint64_t count = 0);

// Rank 0 of a fresh group of two waits 500 ms for a receive that never comes (a TimeoutError);
// returns the CPU time its thread used meanwhile. An idle wait should sleep, not spin.
std::chrono::microseconds cpuTimeOfAnIdleWait(const std::string& kind);

}  // namespace chorus::transport::testing
