// Launcher: runs one node's part of a chorus job — the rendezvous store (node 0), this node's
// ranks, their output, and their end.
//
// Lifecycle:
//  1. Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD (before any thread exists, so the store's threads
//     inherit the mask) and receives them through a signalfd; becomes a child subreaper, so
//     processes orphaned by a dying rank are re-parented to the launcher, which reaps them.
//  2. Starts the TCP store on 127.0.0.1 (or --bind's address; a free port; several nodes: see
//     below) with a fresh job token, and spawns the ranks (see rank_process.h,
//     rank_environment.h), telling them where to bind (Note [Bind address]).
//  3. One event loop (epoll over the output pipes and the signalfd) forwards output, notices
//     exits and signals. Nothing sleeps; the only timed waits are the kill grace and the drain.
//  4. A rank that exits non-zero or is killed: the other ranks get kFailureGrace to notice (their
//     pending collectives raise an error naming that rank) and exit on their own; then chorusrun
//     sends SIGTERM to every rank's process group that is left, SIGKILL after --kill-grace, and
//     exits with the first failed rank's code (128 + signal if it was killed). Once the ranks are
//     gone it prints one line on stderr: the first failure, then the ranks that failed after it
//     (see Note [Failure grace]). A signal to the launcher: forwarded to every
//     rank's process group, SIGKILL after the grace, exit 128 + signal; a second signal kills at
//     once.
//  5. Once every rank has exited, any process left in a rank's group is killed, output is drained
//     until the pipes close (at most kDrainTimeout), and all children are reaped.
//  6. Then, and on every other way out once ranks were started (an exception included, through
//     the destructor), what is left of the job's shared-memory segments (/dev/shm/chorus-<job
//     id>-*) is removed, before chorusrun exits (see shm_cleanup.h); a segment that cannot be
//     removed is named on stderr.
//
// Several nodes (--nnodes > 1): one launcher per node; node 0's serves the store on --master,
// and the launchers learn of each other's failures and completion through it (see node_group.h).
// A failure on this node is recorded there; one recorded elsewhere, or the store lost, stops this
// node's ranks like a failure here (one line naming the node and rank, that rank's exit code).
// Node 0 exits only once every node has finished (or after --timeout, default 300 s, past its own
// ranks), so that the others can still reach the store.
//
// Limits: processes that a rank moves out of its process group (setsid, setpgid) are not killed;
// if they keep a pipe open, the launcher stops waiting for it after kDrainTimeout, and segments
// they create after the cleanup stay. A launcher killed with SIGKILL cleans up nothing.
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "job_records.h"
#include "node_group.h"
#include "options.h"
#include "output_forwarder.h"
#include "rank_process.h"
#include "unique_fd.h"

namespace chorus::store {
class Store;
}  // namespace chorus::store

namespace chorus::store {
class TcpStoreServer;
}

namespace chorus::launcher {

inline constexpr std::chrono::milliseconds kDrainTimeout{2000};

// Note [Failure grace]
// When a rank fails, its peers are usually inside a collective with it. They notice within
// milliseconds (a closed socket, a pidfd, an abort message) and raise a PeerError that names the
// failed rank, which is the explanation the user needs; stopping them at once with SIGTERM would
// throw that away. So the launcher waits up to kFailureGrace for the others to exit on their own
// before it signals what is left. A rank busy with something else (not in a collective) is
// stopped after the grace as before.
inline constexpr std::chrono::milliseconds kFailureGrace{3000};

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

  // `bindHost`: exported as CHORUS_BIND_ADDR unless empty. `torchPort`: MASTER_PORT.
  void spawnRanks(const std::string& token,
                  const std::string& storeHost,
                  uint16_t storePort,
                  uint16_t torchPort,
                  const std::string& bindHost);
  // Removes the job's leftover shared-memory segments, once; nothing before jobId_ is set.
  void removeLeftoverSegments();
  void handleNodeEvent();
  // Stops this node's ranks after a failure here, telling the other nodes.
  void fail(int signal, int exitCode, const std::string& message);
  std::string nodeName() const;
  void eventLoop();
  void handleSignals();
  void checkRankExits();
  void beginStop(int signal, int exitCode);
  // A failure (here or on another node): stop the ranks after kFailureGrace unless they all exit.
  void stopAfterGrace(int exitCode);
  // The one line that ends a failed job: the first failure, then the ones after it.
  void sayFailures() const;
  // Writes the job's first failed rank into the store (store/rank_failure.h), best effort: ranks
  // whose GPU work waits on it inside NCCL learn of it there.
  void recordRankFailure(int rank, const std::string& what) noexcept;
  void recordEarlyExit(int rank, const std::string& what) noexcept;
  void writeToStore(int rank,
                    const std::string& record,
                    const std::function<void(store::Store&)>& write) noexcept;
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
  std::string storeAddress_;  // "host:port" of the job's store, once the ranks are started
  std::string token_;
  std::unique_ptr<NodeGroup> nodes_;
  std::unique_ptr<OutputForwarder> output_;
  std::vector<RankProcess> ranks_;
  std::vector<std::pair<int, int>> rankStreams_;  // each rank's stdout and stderr read fds
  // CHORUS_JOB_ID, set just before the ranks are started; cleared once its segments are removed.
  std::string jobId_;

  int exitCode_ = 0;
  bool stopping_ = false;
  // Signals the launcher has sent to the ranks; a rank killed by any other signal failed on its
  // own.
  std::set<int> sentSignals_;
  bool finishing_ = false;
  bool childrenLeft_ = true;
  std::optional<TimePoint> killAt_;
  std::optional<TimePoint> stopAt_;      // the end of the failure grace
  bool failed_ = false;                  // a rank here or another node failed
  std::vector<std::string> failures_;    // how each failed rank ended, in the order seen
  std::set<int> earlyExits_;             // ranks that exited 0 before the job ended
  std::map<int, std::string> endings_;   // how each rank that ended did, by rank
  std::unique_ptr<JobRecords> records_;  // flight records and the timeline (job_records.h)
  std::optional<TimePoint> drainUntil_;
  bool drained_ = false;
  // Multi-node: the node group's watcher has reported (the job may end), this node's failure was
  // reported, and (node 0) how long to wait for the other nodes once its own ranks are done.
  bool nodeSettled_ = false;
  bool ownFailure_ = false;
  std::optional<TimePoint> waitNodesUntil_;
};

}  // namespace chorus::launcher
