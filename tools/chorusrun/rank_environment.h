// The environment chorusrun gives each rank: the launcher's own environment, minus any stale
// launch variables, plus the job's CHORUS_* variables and their torchrun-compatible twins.
//
// The job token travels only here (never on a command line, where /proc/<pid>/cmdline and `ps`
// would show it to every user of the machine; /proc/<pid>/environ is readable by the owner only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::launcher {

struct JobEnvironment {
  int size = 1;       // world size
  int localSize = 1;  // ranks on this node
  int nodeRank = 0;
  int nnodes = 1;
  std::string storeHost;
  uint16_t storePort = 0;
  std::string token;
  std::string jobId;
  std::optional<std::string> timeout;  // CHORUS_TIMEOUT, seconds
};

// "NAME=value" strings for the rank with this local rank (world rank = nodeRank * localSize +
// localRank), built on `base` (a null-terminated environ array).
std::vector<std::string> rankEnvironment(const JobEnvironment& job,
                                         int localRank,
                                         const char* const* base);

// A short random id (12 hex characters) that names this job's shared resources (shared-memory
// segments, files), independent of the token.
std::string generateJobId();

}  // namespace chorus::launcher
