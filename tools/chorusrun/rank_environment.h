// The environment chorusrun gives each rank: the launcher's own environment, minus any stale
// launch variables, plus the job's CHORUS_* variables and their torchrun-compatible twins.
//
// CHORUS_JOB_ID: 16 hex digits naming this job's shared resources on a machine (chorus transports
// name their shared-memory segments "/chorus-<job id>-..."; the launcher removes what is left of
// them after the job, see shm_cleanup.h). Fresh for every job and the same on every node of one
// job (node 0's launcher draws it and publishes it to the others through the store, see
// node_group.h); unlike the token it is no secret and says nothing about it.
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
  // MASTER_PORT: a port that was free on the store's host when the job started, for the store
  // torch.distributed's env:// rendezvous makes its rank 0 serve (chorus's own store is on
  // storePort, CHORUS_STORE), so that init_process_group() works unchanged under chorusrun.
  uint16_t torchPort = 0;
  // CHORUS_BIND_ADDR: where the ranks' listeners bind (Note [Bind address]); empty: not exported.
  std::string bindHost;
  std::string token;
  std::string jobId;                   // CHORUS_JOB_ID, see newJobId()
  std::string recorderDir;             // CHORUS_RECORDER_DIR (job_records.h); empty: not set
  std::optional<std::string> timeout;  // CHORUS_TIMEOUT, seconds
};

// "NAME=value" strings for the rank with this local rank (world rank = nodeRank * localSize +
// localRank), built on `base` (a null-terminated environ array).
std::vector<std::string> rankEnvironment(const JobEnvironment& job,
                                         int localRank,
                                         const char* const* base);

// A TCP port that is free on `host` now (the kernel's pick: bound, read, released). Another
// process may take it before the job does; torchrun's default port has the same race.
uint16_t freePort(const std::string& host);

// A fresh random job id: 16 hex digits from the job token's random source (OpenSSL's CSPRNG),
// independent of the token.
std::string newJobId();

}  // namespace chorus::launcher
