// The -H / --hostfile coordinator: starts one chorusrun launcher per host over ssh and waits for
// them.
//
// For host i of N (all with K slots) it runs
//   $CHORUS_RSH host 'chorusrun --nnodes N --node-rank i --master M --nproc-per-node K
//                     --token-stdin [options] program args...'
// (CHORUS_RSH defaults to "ssh" and may hold extra words, e.g. "ssh -p 2222"; the remote command
// is one shell-quoted string, as ssh hands it to the remote shell). M is --master, else the first
// host, with port 29500 unless given. The job token (--token-file, CHORUS_JOB_TOKEN, or a fresh
// one) is written to each ssh's stdin, never put on a command line. The launchers coordinate
// failures among themselves through node 0's store; the coordinator forwards SIGINT/SIGTERM/SIGHUP
// to every ssh, and if one launcher exits non-zero while others keep running past kRemoteGrace, it
// stops them (SIGTERM, then SIGKILL). Output is not relayed: each ssh writes the remote
// launcher's (already rank-prefixed) lines straight to this process's stdout and stderr.
//
// Limits: every host needs the same number of slots; chorusrun must be on the remote PATH.
#pragma once

#include <chrono>

#include "options.h"

namespace chorus::launcher {

inline constexpr std::chrono::milliseconds kRemoteGrace{10000};
inline constexpr int kDefaultMasterPort = 29500;

// Runs the job; returns chorusrun's exit code (the first failing launcher's, else 0).
int runRemoteLaunchers(const LaunchOptions& options);

}  // namespace chorus::launcher
