// The -H / --hostfile coordinator (see remote_start.h).
#include "remote_start.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "core/check.h"
#include "core/deadline.h"
#include "host_list.h"
#include "job_token.h"
#include "node_group.h"
#include "output_forwarder.h"
#include "unique_fd.h"

namespace chorus::launcher {
namespace {

std::string signalName(int signal) {
  const char* name = sigabbrev_np(signal);
  return name ? std::string("SIG") + name : "signal " + std::to_string(signal);
}

std::string shellQuote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

std::vector<std::string> rshCommand() {
  const char* rsh = std::getenv("CHORUS_RSH");
  std::istringstream words(rsh && *rsh ? rsh : "ssh");
  std::vector<std::string> command;
  for (std::string word; words >> word;) {
    command.push_back(word);
  }
  return command;
}

std::string masterAddress(const LaunchOptions& options, const std::vector<HostSlots>& hosts) {
  std::string master = options.master.empty() ? hosts.front().host : options.master;
  bool hasPort = master.find(':') != std::string::npos && master.back() != ']';
  return hasPort ? master : master + ":" + std::to_string(kDefaultMasterPort);
}

// The command line the remote shell runs for node `node`.
std::string remoteCommand(
    const LaunchOptions& options, int nnodes, int node, int slots, const std::string& master) {
  std::vector<std::string> words = {"chorusrun",
                                    "--nnodes",
                                    std::to_string(nnodes),
                                    "--node-rank",
                                    std::to_string(node),
                                    "--master",
                                    master,
                                    "--nproc-per-node",
                                    std::to_string(slots),
                                    "--token-stdin",
                                    "--connect-timeout",
                                    std::to_string(options.connectTimeout.count() / 1000.0),
                                    "--kill-grace",
                                    std::to_string(options.killGrace.count() / 1000.0)};
  if (options.timeout) {
    words.insert(words.end(), {"--timeout", *options.timeout});
  }
  // The interface to bind (Note [Bind address]) has the same name on every host; ssh does not
  // forward the environment, so it travels on the command line (it is no secret).
  if (const char* interface = std::getenv("CHORUS_IFNAME"); interface && *interface) {
    words.insert(words.begin(), {"env", std::string("CHORUS_IFNAME=") + interface});
  }
  if (!options.tagOutput) {
    words.push_back("--no-tag-output");
  }
  words.insert(words.end(), options.command.begin(), options.command.end());
  std::string line;
  for (const std::string& word : words) {
    line += (line.empty() ? "" : " ") + shellQuote(word);
  }
  return line;
}

// Starts one ssh with its stdin on a pipe; writes the token to it.
pid_t startRemote(std::vector<std::string> argv,
                  const std::string& token,
                  const sigset_t& originalMask) {
  int pipeFds[2];
  CHORUS_SYSCHECK(pipe2(pipeFds, O_CLOEXEC));
  UniqueFd readEnd(pipeFds[0]), writeEnd(pipeFds[1]);
  std::vector<char*> args;
  for (std::string& arg : argv) {
    args.push_back(arg.data());
  }
  args.push_back(nullptr);
  pid_t pid = fork();
  CHORUS_SYSCHECK(pid);
  if (pid == 0) {
    setpgid(0, 0);  // Ctrl-C reaches the coordinator only; it decides what the launchers get.
    pthread_sigmask(SIG_SETMASK, &originalMask, nullptr);
    dup2(readEnd.get(), STDIN_FILENO);
    execvp(args[0], args.data());
    std::string message = std::string("chorusrun: cannot run ") + args[0] + ": " +
                          std::strerror(errno) + " (set CHORUS_RSH?)\n";
    [[maybe_unused]] ssize_t written = ::write(2, message.data(), message.size());
    _exit(127);
  }
  setpgid(pid, pid);
  readEnd.reset();
  writeAll(writeEnd.get(), token + "\n");
  return pid;
}

struct Remote {
  std::string host;
  pid_t pid;
  bool exited = false;
};

// The coordinator's wait: reaps the ssh processes, forwards signals, stops stragglers.
class RemoteJob {
 public:
  RemoteJob(std::vector<Remote> remotes,
            int signalFd,
            std::chrono::milliseconds killGrace,
            std::string master,
            std::string token)
      : remotes_(std::move(remotes)),
        left_(static_cast<int>(remotes_.size())),
        signals_(signalFd),
        killGrace_(killGrace),
        master_(std::move(master)),
        token_(std::move(token)) {}

  int wait() {
    while (left_ > 0) {
      Deadline next = Deadline::never();
      for (const std::optional<Deadline>& at : {termAt_, killAt_}) {
        if (at) {
          next = Deadline::earliest(next, *at);
        }
      }
      pollfd entry{signals_, POLLIN, 0};
      int ready = ::poll(&entry, 1, next.pollTimeoutMs());
      if (ready < 0 && errno != EINTR) {
        CHORUS_SYSCHECK(ready);
      }
      checkDeadlines();
      handleSignals();
      reapExits();
    }
    return exitCode_;
  }

 private:
  void signalAll(int signal) {
    for (const Remote& remote : remotes_) {
      if (!remote.exited) {
        kill(-remote.pid, signal);
      }
    }
  }

  void checkDeadlines() {
    if (termAt_ && termAt_->expired()) {
      writeAll(2, "chorusrun: stopping the launchers still running\n");
      signalAll(SIGTERM);
      termAt_.reset();
      killAt_ = Deadline::after(killGrace_ + std::chrono::seconds(2));
    }
    if (killAt_ && killAt_->expired()) {
      signalAll(SIGKILL);
      killAt_.reset();
    }
  }

  void handleSignals() {
    signalfd_siginfo info;
    while (::read(signals_, &info, sizeof(info)) == sizeof(info)) {
      int signal = static_cast<int>(info.ssi_signo);
      if (signal == SIGCHLD) {
        continue;
      }
      if (!signalled_) {
        // Over real ssh the signal reaches only the local ssh; the store reaches the launchers.
        writeAll(2, "chorusrun: got " + signalName(signal) + "; stopping every node\n");
        reportJobFailure(master_, token_, static_cast<int>(remotes_.size()), 128 + signal,
                         "the -H coordinator got " + signalName(signal), std::chrono::seconds(5));
      }
      signalAll(signalled_ ? SIGKILL : signal);  // A second signal: no more grace.
      signalled_ = true;
      if (exitCode_ == 0) {
        exitCode_ = 128 + signal;
      }
    }
  }

  void reapExits() {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (size_t node = 0; node < remotes_.size(); ++node) {
        Remote& remote = remotes_[node];
        if (remote.pid != pid) {
          continue;
        }
        remote.exited = true;
        --left_;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == 126 || code == 127 || code == 255) {
          writeAll(2, "chorusrun: the launcher of node " + std::to_string(node) + " on " +
                          remote.host + " exited with code " + std::to_string(code) +
                          " (could it be started there? is chorusrun on the remote PATH?)\n");
        }
        if (code != 0 && exitCode_ == 0) {
          exitCode_ = code;
          termAt_ = Deadline::after(kRemoteGrace);
        }
      }
    }
  }

  std::vector<Remote> remotes_;
  int left_;
  int signals_;
  std::chrono::milliseconds killGrace_;
  std::string master_;
  std::string token_;
  int exitCode_ = 0;
  bool signalled_ = false;
  std::optional<Deadline> termAt_, killAt_;
};

std::vector<HostSlots> readHosts(const LaunchOptions& options) {
  std::vector<HostSlots> hosts =
      options.hosts.empty() ? readHostfile(options.hostfile) : parseHostList(options.hosts);
  for (const HostSlots& host : hosts) {
    if (host.slots != hosts.front().slots) {
      throw InvalidArgumentError("every host needs the same number of slots for now (" +
                                 hosts.front().host + " has " +
                                 std::to_string(hosts.front().slots) + ", " + host.host + " has " +
                                 std::to_string(host.slots) + ")");
    }
  }
  return hosts;
}

}  // namespace

int runRemoteLaunchers(const LaunchOptions& options) {
  std::vector<HostSlots> hosts = readHosts(options);
  std::optional<std::string> token = findJobToken(options);
  CHORUS_ASSERT(token.has_value());
  std::string master = masterAddress(options, hosts);

  sigset_t handled, originalMask;
  sigemptyset(&handled);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    sigaddset(&handled, signal);
  }
  CHORUS_ASSERT(pthread_sigmask(SIG_BLOCK, &handled, &originalMask) == 0);
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFd signals(signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  CHORUS_SYSCHECK(signals.get());

  std::vector<Remote> remotes;
  int nnodes = static_cast<int>(hosts.size());
  for (int node = 0; node < nnodes; ++node) {
    std::vector<std::string> argv = rshCommand();
    argv.push_back(hosts[node].host);
    argv.push_back(remoteCommand(options, nnodes, node, hosts[node].slots, master));
    remotes.push_back({hosts[node].host, startRemote(argv, *token, originalMask)});
  }
  return RemoteJob(std::move(remotes), signals.get(), options.killGrace, master, *token).wait();
}

}  // namespace chorus::launcher
