// The launcher's setup and event loop (see launcher.h for the lifecycle).
#include "launcher.h"

#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "connector/bind_address.h"
#include "core/check.h"
#include "core/net/handshake.h"
#include "job_token.h"
#include "rank_environment.h"
#include "shm_cleanup.h"
#include "store/rank_failure.h"
#include "store/tcp_store.h"

extern char** environ;

namespace chorus::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::string signalName(int signal) {
  const char* name = sigabbrev_np(signal);
  return name ? std::string("SIG") + name : "signal " + std::to_string(signal);
}

// Each rank needs two pipe ends open in the launcher; raise the soft limit if a large -np needs it
// (only as far as the hard limit allows; pipe2 then fails with a clear error).
void ensureFileLimit(int ranks) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return;
  }
  rlim_t needed = static_cast<rlim_t>(ranks) * 2 + 64;
  if (limit.rlim_cur < needed) {
    limit.rlim_cur = std::min(needed, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

Launcher::Launcher(LaunchOptions options) : options_(std::move(options)) {
  // Before any thread exists: the store's threads inherit the mask, so these signals only ever
  // arrive through the signalfd.
  sigemptyset(&handled_);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    sigaddset(&handled_, signal);
  }
  CHORUS_ASSERT(pthread_sigmask(SIG_BLOCK, &handled_, &originalMask_) == 0);
  ::signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // Best effort: orphans otherwise go to init.

  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  CHORUS_SYSCHECK(epoll_.get());
  signals_ = UniqueFd(signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
  CHORUS_SYSCHECK(signals_.get());
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = signals_.get();
  CHORUS_SYSCHECK(epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, signals_.get(), &event));
  output_ = std::make_unique<OutputForwarder>(epoll_.get());
}

Launcher::~Launcher() {
  ranks_.clear();  // Kills and reaps what is left.
  removeLeftoverSegments();
  output_.reset();
  nodes_.reset();
  store_.reset();
}

int Launcher::run() {
  std::optional<std::string> token = findJobToken(options_);
  if (!token) {
    say(missingTokenMessage());
    return 2;
  }
  records_ = std::make_unique<JobRecords>();
  // See Note [Bind address] (src/connector/bind_address.h).
  std::optional<std::string> bindHost = connector::launcherBindAddress(options_.bind);
  if (options_.nnodes > 1) {
    nodes_ = std::make_unique<NodeGroup>(options_, *token, bindHost);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = nodes_->eventFd();
    CHORUS_SYSCHECK(epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, nodes_->eventFd(), &event));
    jobId_ = nodes_->jobId();
    try {
      spawnRanks(*token, nodes_->storeHost(), nodes_->storePort(), nodes_->torchPort(),
                 bindHost.value_or(""));
      eventLoop();
    } catch (const std::exception& e) {
      nodes_->reportFailure(
          1, "node " + std::to_string(options_.nodeRank) + "'s chorusrun failed: " + e.what());
      throw;
    }
    removeLeftoverSegments();
    nodes_->finish();
    return exitCode_;
  }
  std::string listenHost = bindHost.value_or("127.0.0.1");
  store_ = std::make_unique<store::TcpStoreServer>(listenHost, 0, *token);
  jobId_ = newJobId();
  std::string storeHost = connector::isWildcardAddress(listenHost) ? "127.0.0.1" : listenHost;
  spawnRanks(*token, storeHost, store_->port(), freePort(storeHost), listenHost);
  eventLoop();
  removeLeftoverSegments();
  return exitCode_;
}

void Launcher::removeLeftoverSegments() {
  for (const std::string& failure : removeJobSharedMemory(jobId_)) {
    say(nodeName() + "could not remove the job's shared-memory segment " + failure +
        "; remove it by hand");
  }
  jobId_.clear();
}

void Launcher::say(const std::string& message) const {
  writeAll(2, "chorusrun: " + message + "\n");
}

std::string Launcher::nodeName() const {
  return nodes_ ? "node " + std::to_string(options_.nodeRank) + " " : "";
}

void Launcher::fail(int signal, int exitCode, const std::string& message) {
  beginStop(signal, exitCode);
  if (nodes_ && !ownFailure_) {
    ownFailure_ = true;
    nodes_->reportFailure(exitCode, message);
  }
}

void Launcher::handleNodeEvent() {
  std::optional<NodeEvent> event = nodes_->takeEvent();
  if (!event) {
    return;
  }
  nodeSettled_ = true;
  if (event->kind == NodeEvent::Kind::kFinished || ownFailure_) {
    return;
  }
  say(event->message + "; stopping the ranks of node " + std::to_string(options_.nodeRank));
  if (!stopping_ && !finishing_ && !failed_) {
    stopAfterGrace(event->exitCode);
  } else if (exitCode_ == 0) {
    exitCode_ = event->exitCode;
  }
}

void Launcher::spawnRanks(const std::string& token,
                          const std::string& storeHost,
                          uint16_t storePort,
                          uint16_t torchPort,
                          const std::string& bindHost) {
  int n = options_.nprocPerNode;
  ensureFileLimit(n);
  storeAddress_ = net::Address{storeHost, storePort}.toString();
  token_ = token;
  JobEnvironment job;
  job.size = n * options_.nnodes;
  job.localSize = n;
  job.nodeRank = options_.nodeRank;
  job.nnodes = options_.nnodes;
  job.storeHost = storeHost;
  job.storePort = storePort;
  job.torchPort = torchPort;
  job.bindHost = bindHost;
  job.token = token;
  job.jobId = jobId_;
  job.recorderDir = records_ ? records_->directory() : "";
  job.timeout = options_.timeout;

  SpawnSpec spec;
  spec.argv = options_.command;
  spec.signalMask = originalMask_;
  // A rank outside the terminal's foreground process group would stop (SIGTTIN) reading a tty.
  bool stdinIsTerminal = isatty(STDIN_FILENO);
  ranks_.reserve(n);
  for (int local = 0; local < n; ++local) {
    int rank = options_.nodeRank * n + local;
    spec.env = rankEnvironment(job, local, environ);
    spec.inheritStdin = rank == 0 && !stdinIsTerminal && !options_.tokenStdin;
    try {
      ranks_.emplace_back(rank, spec);
    } catch (const ExecError& e) {
      say(nodeName() + e.what());
      fail(SIGKILL, e.error() == ENOENT ? 127 : 126, nodeName() + e.what());
      return;
    }
    RankProcess& process = ranks_.back();
    std::string prefix = options_.tagOutput ? "[" + std::to_string(rank) + "] " : "";
    UniqueFd out = process.takeStdout();
    UniqueFd err = process.takeStderr();
    rankStreams_.emplace_back(out.get(), err.get());
    output_->add(std::move(out), prefix, STDOUT_FILENO);
    output_->add(std::move(err), prefix, STDERR_FILENO);
  }
}

void Launcher::eventLoop() {
  checkRankExits();  // Covers zero ranks started (the program could not be executed).
  while (true) {
    if (finishing_ && !drained_ &&
        ((output_->openStreams() == 0 && !childrenLeft_) || Clock::now() >= *drainUntil_)) {
      drained_ = true;
      drainUntil_.reset();
      output_->closeAll();
    }
    if (drained_ && (!nodes_ || nodeSettled_)) {
      break;
    }
    if (waitNodesUntil_ && !nodeSettled_ && Clock::now() >= *waitNodesUntil_) {
      say("node 0 gave up waiting for the other nodes to finish; exiting");
      exitCode_ = 1;
      nodeSettled_ = true;
      continue;
    }
    if (killAt_ && Clock::now() >= *killAt_) {
      signalAll(SIGKILL);
      killAt_.reset();
    }
    if (stopAt_ && Clock::now() >= *stopAt_) {
      stopAt_.reset();
      if (!stopping_)
        beginStop(SIGTERM, exitCode_);
    }
    int timeoutMs = -1;
    if (auto deadline = nextDeadline()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
      timeoutMs = static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
    }
    epoll_event events[64];
    int ready = epoll_wait(epoll_.get(), events, 64, timeoutMs);
    if (ready == -1 && errno == EINTR) {
      continue;
    }
    CHORUS_SYSCHECK(ready);
    for (int i = 0; i < ready; ++i) {
      int fd = events[i].data.fd;
      if (fd == signals_.get()) {
        handleSignals();
      } else if (nodes_ && fd == nodes_->eventFd()) {
        handleNodeEvent();
      } else {
        output_->onReadable(fd);
      }
    }
  }
  output_->closeAll();
  sayFailures();
  if (const std::string merged = records_->mergeTimeline(options_.nodeRank); !merged.empty())
    say(nodeName() + merged);
}

void Launcher::sayFailures() const {
  if (failures_.empty())
    return;
  std::string line = failures_.front();
  for (size_t i = 1; i < failures_.size(); ++i) line += (i == 1 ? "; then " : ", ") + failures_[i];
  if (!earlyExits_.empty()) {
    std::string ranks;
    for (int rank : earlyExits_)
      ranks += (ranks.empty() ? "; rank " : ", rank ") + std::to_string(rank);
    line += ranks + " exited with code 0";
  }
  say(line);
  for (const std::string& summary :
       records_->failureSummary(options_.nnodes * options_.nprocPerNode, endings_))
    say(nodeName() + summary);
}

std::optional<Launcher::TimePoint> Launcher::nextDeadline() const {
  std::optional<TimePoint> next;
  for (const std::optional<TimePoint>& at :
       {killAt_, stopAt_, drainUntil_, nodeSettled_ ? std::nullopt : waitNodesUntil_}) {
    if (at && (!next || *at < *next)) {
      next = at;
    }
  }
  return next;
}

void Launcher::handleSignals() {
  signalfd_siginfo info;
  bool child = false;
  while (::read(signals_.get(), &info, sizeof(info)) == sizeof(info)) {
    int signal = static_cast<int>(info.ssi_signo);
    if (signal == SIGCHLD) {
      child = true;
    } else if (finishing_) {
      drainUntil_ = Clock::now();  // Every rank is gone; stop waiting for stragglers.
    } else if (!stopping_) {
      say(nodeName() + "got " + signalName(signal) + "; forwarding it to all ranks");
      fail(signal, 128 + signal,
           "node " + std::to_string(options_.nodeRank) + "'s chorusrun got " + signalName(signal));
    } else {
      signalAll(SIGKILL);  // A second signal: no more grace.
      killAt_.reset();
    }
  }
  if (child) {
    checkRankExits();
  }
}

void Launcher::checkRankExits() {
  // The exits seen this time. A rank killed by a signal the launcher never sent comes first: when
  // it died and its peers then failed over it before the launcher looked (a loaded machine), its
  // death is the cause and theirs the consequence, whatever their rank order.
  std::vector<std::pair<RankProcess*, ExitStatus>> exits;
  for (RankProcess& process : ranks_) {
    if (std::optional<ExitStatus> status = process.pollExit())
      exits.emplace_back(&process, *status);
  }
  std::stable_partition(exits.begin(), exits.end(), [&](const auto& exit) {
    return exit.second.signaled && !sentSignals_.contains(exit.second.signal);
  });
  std::optional<int> failedCode;
  std::string failure;
  for (auto& [rankProcess, status] : exits) {
    RankProcess& process = *rankProcess;
    if (status.success() && !finishing_ && !stopping_) {
      earlyExits_.insert(process.rank());  // only worth saying if the job then fails
      recordEarlyExit(process.rank(), nodeName() + status.describe(process.rank()));
    }
    endings_[process.rank()] = status.describe(process.rank());
    if (status.success()) {
      continue;
    }
    // After a stop began, exits are what the launcher asked for, except deaths by a signal it
    // never sent: a rank killed at nearly the moment another failed (whose exit the launcher may
    // have seen first, e.g. a survivor reporting the dead peer) is named too.
    if (stopping_ && !(status.signaled && !sentSignals_.contains(status.signal))) {
      continue;
    }
    // Forward the rank's last output before saying why it ended.
    auto [out, err] = rankStreams_[process.rank() - options_.nodeRank * options_.nprocPerNode];
    output_->drainAvailable(out);
    output_->drainAvailable(err);
    std::string what = nodeName() + status.describe(process.rank());
    failures_.push_back(what);
    if (!failedCode) {
      failedCode = status.launcherExitCode();
      failure = what;
      if (!failed_)
        recordRankFailure(process.rank(), what);
    }
  }
  if (failedCode && !failed_) {
    stopAfterGrace(*failedCode);
    if (nodes_ && !ownFailure_) {
      ownFailure_ = true;
      nodes_->reportFailure(*failedCode, failure);
    }
  }
  if (finishing_) {
    reapChildren();
  } else if (std::all_of(ranks_.begin(), ranks_.end(), [](auto& p) { return p.exited(); })) {
    beginFinish();
  } else {
    reapOrphans();
  }
}

// For ranks still waiting for it to join a communicator (Note [A rank that never joins]).
void Launcher::recordEarlyExit(int rank, const std::string& what) noexcept {
  writeToStore(rank, "exit",
               [&](store::Store& store) { store::recordEarlyExit(store, rank, what); });
}

void Launcher::recordRankFailure(int rank, const std::string& what) noexcept {
  writeToStore(rank, "failure", [&](store::Store& store) {
    store::recordRankFailure(store, {rank, what});
  });
}

// One connection to the job's store for `write`; a failure is said, never thrown.
void Launcher::writeToStore(int rank,
                            const std::string& record,
                            const std::function<void(store::Store&)>& write) noexcept {
  try {
    store::TcpStore store(net::Address::parse(storeAddress_), token_,
                          Deadline::after(std::chrono::seconds(2)));
    write(store);
  } catch (const std::exception& e) {
    say("could not record rank " + std::to_string(rank) + "'s " + record +
        " in the store: " + e.what());
  }
}

void Launcher::beginStop(int signal, int exitCode) {
  stopping_ = true;
  exitCode_ = exitCode;
  signalAll(signal);
  if (signal != SIGKILL) {
    killAt_ = Clock::now() + options_.killGrace;
  }
}

void Launcher::stopAfterGrace(int exitCode) {
  failed_ = true;
  exitCode_ = exitCode;
  stopAt_ = Clock::now() + kFailureGrace;
}

void Launcher::signalAll(int signal) {
  sentSignals_.insert(signal);
  for (RankProcess& process : ranks_) {
    process.signalGroup(signal);
  }
}

void Launcher::beginFinish() {
  finishing_ = true;
  stopAt_.reset();
  if (nodes_ && !stopping_ && !failed_) {
    nodes_->reportDone();
    std::chrono::milliseconds wait{300000};
    if (options_.timeout) {
      wait = std::chrono::milliseconds(std::llround(std::stod(*options_.timeout) * 1000.0));
    }
    waitNodesUntil_ = Clock::now() + std::max(wait, kExitWait);
  }
  killAt_.reset();
  signalAll(SIGKILL);  // Whatever the ranks left behind in their process groups.
  for (RankProcess& process : ranks_) {
    process.reap();
  }
  drainUntil_ = Clock::now() + kDrainTimeout;
  reapChildren();
}

// Reaps exited orphans (re-parented to the subreaper) that are not ranks. A rank's zombie is kept
// (see Note [Rank process groups]), and waitid reports children in order, so this stops at one.
void Launcher::reapOrphans() {
  while (true) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) {
      return;
    }
    for (const RankProcess& process : ranks_) {
      if (process.pid() == info.si_pid) {
        return;
      }
    }
    waitpid(info.si_pid, nullptr, 0);
  }
}

void Launcher::reapChildren() {
  while (true) {
    pid_t pid = waitpid(-1, nullptr, WNOHANG);
    if (pid > 0 || (pid == -1 && errno == EINTR)) {
      continue;
    }
    childrenLeft_ = !(pid == -1 && errno == ECHILD);
    return;
  }
}

}  // namespace chorus::launcher
