// NodeGroup: how the launchers of a multi-node job (one per node) agree on the job and on its end,
// through the store that node 0's launcher serves on --master.
//
// Store keys (all under "launcher/"):
//   job_id        the job id (CHORUS_JOB_ID, see rank_environment.h) drawn by node 0 and set
//                 before config; the other nodes read it, so every node names the job alike.
//   config        "nnodes nproc" published by node 0; other nodes compare and refuse a mismatch.
//   torch_port    a port free on node 0's store host when the job started (freePort), set before
//                 config: every node's ranks get it as MASTER_PORT, for torch.distributed's store.
//   node/<I>      claimed once per node rank (compareSet), so two launchers with one rank fail.
//   failed        the first failure, "<exit code> <message>" (compareSet: the first one wins).
//   stop/<I>      wakes node I's watcher: "ok" (node I may finish) or a failure as above.
//   done          nodes whose ranks all exited 0; the node that brings it to N sets stop/0 "ok".
//   exited        launchers about to exit; the one that brings it to N sets all_exited, which node
//                 0 waits for (kExitWait at most) so that the others can still read their stop key.
//
// A watcher thread with its own connection blocks in get("launcher/stop/<I>") (re-armed every
// kWatchSlice; no polling in between) and reports through an eventfd that the launcher's epoll
// loop watches: a failure elsewhere, "finished" ("ok"), or the store lost (node 0 died). It is
// woken at the end by the launcher's own stop/<I> write (done or failure). Cost: a handful of
// store round trips per job. Limits: a launcher killed with SIGKILL reports nothing; the others
// then learn of it only through their ranks (which fail with PeerError) or, for node 0's
// completion, after --wait-nodes.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "options.h"
#include "unique_fd.h"

namespace chorus::store {
class TcpStore;
class TcpStoreServer;
}  // namespace chorus::store

namespace chorus::launcher {

inline constexpr std::chrono::milliseconds kExitWait{10000};
inline constexpr std::chrono::hours kWatchSlice{1};

// What the watcher saw.
struct NodeEvent {
  enum class Kind { kFinished, kFailed, kStoreLost } kind;
  int exitCode = 0;     // kFailed: the failing rank's launcher exit code
  std::string message;  // kFailed: "node I rank R ..."; kStoreLost: why
};

// Records a failure in the job's store from outside any node (the -H coordinator, when signalled:
// over real ssh a signal does not reach the remote launchers), waking every launcher. Best effort,
// within `timeout`.
void reportJobFailure(const std::string& master,
                      const std::string& token,
                      int nnodes,
                      int exitCode,
                      const std::string& message,
                      std::chrono::milliseconds timeout) noexcept;

class NodeGroup {
 public:
  // Node 0 serves the store on options.master (bound to `bindHost` when given, else to the
  // master's host, which may not be a wildcard: see Note [Bind address]); every node connects to
  // it (node 0 at once, the others retrying for options.connectTimeout), claims its node rank and
  // checks the config. Throws chorus::Error with a clear message on a mismatch or when the store
  // cannot be reached.
  NodeGroup(const LaunchOptions& options,
            const std::string& token,
            const std::optional<std::string>& bindHost);
  ~NodeGroup();
  NodeGroup(const NodeGroup&) = delete;
  NodeGroup& operator=(const NodeGroup&) = delete;

  const std::string& storeHost() const { return host_; }
  uint16_t storePort() const { return port_; }
  // The job id, the same on every node (see "job_id" above).
  const std::string& jobId() const { return jobId_; }
  // MASTER_PORT for torch.distributed (see "torch_port" above), the same on every node.
  uint16_t torchPort() const { return torchPort_; }
  // Becomes readable when the watcher has an event.
  int eventFd() const { return eventFd_.get(); }
  // The watcher's event, once (after eventFd() became readable).
  std::optional<NodeEvent> takeEvent();

  // Records a failure on this node ("node I ..." message) and wakes every node's watcher. Best
  // effort: a lost store is ignored (the caller is stopping anyway).
  void reportFailure(int exitCode, const std::string& message) noexcept;
  // This node's ranks all exited 0.
  void reportDone() noexcept;
  // Called once before the launcher exits: counts this launcher out and, on node 0, waits (at
  // most kExitWait) for every launcher to do so; then stops the watcher.
  void finish() noexcept;

 private:
  void watch();

  LaunchOptions options_;
  std::string host_;
  uint16_t port_ = 0;
  std::string jobId_;
  uint16_t torchPort_ = 0;
  std::unique_ptr<store::TcpStoreServer> server_;
  std::unique_ptr<store::TcpStore> store_;       // the launcher thread's connection
  std::unique_ptr<store::TcpStore> watchStore_;  // the watcher's
  UniqueFd eventFd_;
  std::mutex mutex_;
  std::optional<NodeEvent> event_;
  bool eventTaken_ = false;
  std::atomic<bool> stopping_{false};
  bool finished_ = false;
  std::thread watcher_;
};

}  // namespace chorus::launcher
