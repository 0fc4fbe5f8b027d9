// Removing a job's POSIX shared-memory segments once its ranks are gone.
//
// chorus transports name their shared-memory segments "/chorus-<job id>-<anything>" (job id:
// CHORUS_JOB_ID, see rank_environment.h), which Linux keeps as files /dev/shm/chorus-<job id>-...
// A transport unlinks its names right after setup, but a rank killed in between (a failure during
// setup, kill -9) leaves them behind, holding memory until the machine reboots. The launcher
// therefore removes them after every rank of its node has exited, on every exit path that follows
// the ranks' start (see launcher.h).
//
// Contract of removeJobSharedMemory(jobId, directory):
//  - unlinks every entry of `directory` whose name starts with "chorus-<jobId>-", and nothing
//    else (other jobs' segments, names without the trailing '-');
//  - an entry that vanishes meanwhile (ENOENT) and a missing `directory` are not errors;
//  - never throws; returns one "PATH: reason" line per entry it could not remove (e.g. EACCES),
//    for the caller to report;
//  - does nothing for an empty jobId (no prefix to match).
// A process that escaped the ranks' process groups and creates a segment afterwards is not
// covered (see the limits in launcher.h).
#pragma once

#include <string>
#include <vector>

namespace chorus::launcher {

inline constexpr const char* kSharedMemoryDirectory = "/dev/shm";

// The name prefix of a job's segments in the shared-memory directory: "chorus-<jobId>-".
std::string jobSegmentPrefix(const std::string& jobId);

std::vector<std::string> removeJobSharedMemory(
    const std::string& jobId, const std::string& directory = kSharedMemoryDirectory) noexcept;

}  // namespace chorus::launcher
