// Launcher: runs one single-node chorus job — the rendezvous store, N ranks, their output, and
// their end.
//
// Lifecycle:
//  1. Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD (before any thread exists, so the store's threads
//     inherit the mask) and receives them through a signalfd; becomes a child subreaper, so
//     processes orphaned by a dying rank are re-parented to the launcher, which reaps them.
//  2. Starts the TCP store on 127.0.0.1 (a free port) with a fresh job token, and spawns the ranks
//     (see rank_process.h, rank_environment.h).
//  3. One event loop (epoll over the output pipes and the signalfd) forwards output, notices
//     exits and signals. Nothing sleeps; the only timed waits are the kill grace and the drain.
//  4. A rank that exits non-zero or is killed: chorusrun says which and how on stderr, sends
//     SIGTERM to every rank's process group, SIGKILL after --kill-grace, and exits with that
//     rank's code (128 + signal if it was killed). A signal to the launcher: forwarded to every
//     rank's process group, SIGKILL after the grace, exit 128 + signal; a second signal kills at
//     once.
//  5. Once every rank has exited, any process left in a rank's group is killed, output is drained
//     until the pipes close (at most kDrainTimeout), and all children are reaped.
//
// Limits: one node (--nnodes 1). Processes that a rank moves out of its process group (setsid,
// setpgid) are not killed; if they keep a pipe open, the launcher stops waiting for it after
// kDrainTimeout.
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "options.h"
#include "output_forwarder.h"
#include "rank_process.h"
#include "unique_fd.h"

namespace chorus::store {
class TcpStoreServer;
}

namespace chorus::launcher {

inline constexpr std::chrono::milliseconds kDrainTimeout{2000};

class Launcher {
 public:
  explicit Launcher(LaunchOptions options);
  // Kills and reaps any rank still running (after an exception).
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Runs the job; returns chorusrun's exit code.
  int run();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;

  void spawnRanks(const std::string& token);
  void eventLoop();
  void handleSignals();
  void checkRankExits();
  void beginStop(int signal, int exitCode);
  void signalAll(int signal);
  void beginFinish();
  void reapOrphans();
  void reapChildren();
  void say(const std::string& message) const;
  std::optional<TimePoint> nextDeadline() const;

  LaunchOptions options_;
  sigset_t handled_;
  sigset_t originalMask_;
  UniqueFd epoll_;
  UniqueFd signals_;
  std::unique_ptr<store::TcpStoreServer> store_;
  std::unique_ptr<OutputForwarder> output_;
  std::vector<RankProcess> ranks_;
  std::vector<std::pair<int, int>> rankStreams_;  // each rank's stdout and stderr read fds

  int exitCode_ = 0;
  bool stopping_ = false;
  // Signals the launcher has sent to the ranks; a rank killed by any other signal failed on its
  // own.
  std::set<int> sentSignals_;
  bool finishing_ = false;
  bool childrenLeft_ = true;
  std::optional<TimePoint> killAt_;
  std::optional<TimePoint> drainUntil_;
};

}  // namespace chorus::launcher
