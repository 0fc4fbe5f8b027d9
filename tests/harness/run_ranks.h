// Multi-rank test harness.
//
// runRanks(size, fn) runs fn(communicator) on `size` threads, each with its own world communicator
// over real TCP sockets on 127.0.0.1 and one in-process HashStore. forkRanks(size, fn) does the
// same with one process per rank (fork) and a TCP store served by the test process: for killed-peer
// and lifetime tests. Both fail the test, never hang: after the deadline every communicator is
// aborted (threads) or every child is killed (processes).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::testing {

struct RankOptions {
  std::string backend = "auto";
  // The whole run must finish by then.
  std::chrono::seconds deadline{60};
  // Per-operation timeout of the communicators.
  std::chrono::milliseconds timeout{30'000};
  // Node id of each rank (simulated nodes); empty: all on one node.
  std::vector<std::string> nodeIds;
};

using RankFunction = std::function<void(Communicator& comm)>;

// Exceptions thrown by fn are reported as test failures naming the rank.
void runRanks(int size, const RankFunction& fn, const RankOptions& options = {});
// runRanks of two ranks in which rank 1 stays alive but never calls, until `rankZero` (run on
// rank 0) returns or throws: the absent-rank tests.
void runWithRankOneSilent(const RankFunction& rankZero, const RankOptions& options = {});

// Returns each child's wait status (as from waitpid). A child exits 0 when fn returned without
// throwing or failing an EXPECT, 1 otherwise; children still running at the deadline are killed
// with SIGKILL and the test fails.
std::vector<int> forkRanks(int size, const RankFunction& fn, const RankOptions& options = {});
// EXPECTs that every status is a clean exit(0).
void expectAllSucceeded(const std::vector<int>& statuses);

}  // namespace chorus::testing
