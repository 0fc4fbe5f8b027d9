// Running chorusrun under test (see launcher_process.h).
#include "launcher_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace chorus::launcher::testing {
namespace {

std::vector<std::string> mergedEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string text(*entry);
    std::string name = text.substr(0, text.find('='));
    bool overridden = false;
    for (const std::string& e : extra) {
      overridden = overridden || e.substr(0, e.find('=')) == name;
    }
    if (!overridden) {
      env.push_back(text);
    }
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) {
    pointers.push_back(s.data());
  }
  pointers.push_back(nullptr);
  return pointers;
}

void check(bool ok, const char* what) {
  if (!ok) {
    throw std::runtime_error(std::string(what) + " failed: " + std::strerror(errno));
  }
}

}  // namespace

LauncherProcess::LauncherProcess(const std::vector<std::string>& args,
                                 const std::vector<std::string>& extraEnv)
    : start_(std::chrono::steady_clock::now()) {
  int out[2];
  int err[2];
  check(pipe2(out, O_CLOEXEC) == 0, "pipe2");
  check(pipe2(err, O_CLOEXEC) == 0, "pipe2");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<std::string> argv = {CHORUSRUN_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env = mergedEnvironment(extraEnv);
  std::vector<char*> argvC = cStrings(argv);
  std::vector<char*> envC = cStrings(env);
  int error = posix_spawn(&pid_, argvC[0], &actions, nullptr, argvC.data(), envC.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  outFd_ = out[0];
  errFd_ = err[0];
  errno = error;
  check(error == 0, "posix_spawn " CHORUSRUN_PATH);
  pidFd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  check(pidFd_ >= 0, "pidfd_open");
}

LauncherProcess::~LauncherProcess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  for (int fd : {outFd_, errFd_, pidFd_}) {
    if (fd >= 0) {
      close(fd);
    }
  }
}

bool LauncherProcess::pump(Deadline deadline) {
  if (deadline.expired()) {
    return false;
  }
  pollfd fds[3] = {{outFd_, POLLIN, 0}, {errFd_, POLLIN, 0}, {exited_ ? -1 : pidFd_, POLLIN, 0}};
  int ready = poll(fds, 3, deadline.pollTimeoutMs());
  if (ready <= 0) {
    return !deadline.expired();
  }
  std::string* sinks[2] = {&result_.out, &result_.err};
  int* fdSlots[2] = {&outFd_, &errFd_};
  for (int i = 0; i < 2; ++i) {
    if (fds[i].revents == 0) {
      continue;
    }
    char buffer[65536];
    ssize_t n = read(*fdSlots[i], buffer, sizeof(buffer));
    if (n > 0) {
      sinks[i]->append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      close(*fdSlots[i]);
      *fdSlots[i] = -1;
    }
  }
  if (fds[2].revents != 0) {
    exited_ = true;
  }
  return true;
}

bool LauncherProcess::waitForStdout(const std::function<bool(const std::string&)>& ready,
                                    Deadline deadline) {
  while (!ready(result_.out)) {
    if (done() || !pump(deadline)) {
      return false;
    }
  }
  return true;
}

void LauncherProcess::signal(int signal) { kill(pid_, signal); }

LaunchResult LauncherProcess::finish(Deadline deadline) {
  while (!done()) {
    if (!pump(deadline)) {
      result_.timedOut = true;
      kill(pid_, SIGKILL);
      break;
    }
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  result_.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start_);
  if (WIFEXITED(status)) {
    result_.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result_.termSignal = WTERMSIG(status);
  }
  return result_;
}

LaunchResult runLauncher(const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout,
                         const std::vector<std::string>& extraEnv) {
  LauncherProcess launcher(args, extraEnv);
  return launcher.finish(Deadline::after(timeout));
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "chorusrun-test-XXXXXX").string();
  check(mkdtemp(pattern.data()) != nullptr, "mkdtemp");
  path_ = pattern;
}

TempDir::~TempDir() {
  // A test that timed out may have left ranks running: kill what they recorded, but only
  // processes still in one of the ranks' process groups (never an unrelated process that got a
  // recycled PID).
  std::vector<pid_t> pids = recordedPids();
  for (pid_t pid : pids) {
    pid_t group = getpgid(pid);
    if (group > 0 && std::find(pids.begin(), pids.end(), group) != pids.end()) {
      kill(pid, SIGKILL);
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void TempDir::makeFifo(const std::string& name) const {
  check(mkfifo((path_ / name).c_str(), 0600) == 0, "mkfifo");
}

std::vector<pid_t> TempDir::recordedPids() const {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) {
    if (entry.path().filename().string().rfind("pid.", 0) == 0) {
      std::ifstream in(entry.path());
      long pid = 0;
      if (in >> pid && pid > 1) {
        pids.push_back(static_cast<pid_t>(pid));
      }
    }
  }
  return pids;
}

bool processGone(pid_t pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

std::vector<std::string> rankLines(const std::string& text, int rank) {
  std::string prefix = "[" + std::to_string(rank) + "] ";
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) {
      end = text.size();
    }
    std::string line = text.substr(begin, end - begin);
    if (line.rfind(prefix, 0) == 0) {
      lines.push_back(line.substr(prefix.size()));
    }
    begin = end + 1;
  }
  return lines;
}

}  // namespace chorus::launcher::testing
