// Test helpers for chorusrun: run the built launcher as a child process, collect its stdout and
// stderr, send it signals, and check that the processes it started are gone afterwards.
//
// Every wait has a deadline: a launcher that runs past it is SIGKILLed (with any rank whose PID was
// recorded) and the result says timedOut, so a broken launcher fails a test instead of hanging it.
// Waiting is event-driven (poll on the pipes and a pidfd), never a sleep loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/deadline.h"

namespace chorus::launcher::testing {

struct LaunchResult {
  int exitCode = -1;   // the launcher's exit status, or -1 if it was killed by a signal
  int termSignal = 0;  // the signal that killed the launcher, if one did
  bool timedOut = false;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

class LauncherProcess {
 public:
  // Starts `chorusrun args...` with stdin from /dev/null and the test's environment plus `extraEnv`
  // ("NAME=value", overriding).
  explicit LauncherProcess(const std::vector<std::string>& args,
                           const std::vector<std::string>& extraEnv = {});
  // Kills the launcher if it is still running.
  ~LauncherProcess();
  LauncherProcess(const LauncherProcess&) = delete;
  LauncherProcess& operator=(const LauncherProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until `ready(out)` holds; false if the launcher ended or the deadline passed
  // first.
  bool waitForStdout(const std::function<bool(const std::string&)>& ready, Deadline deadline);
  void signal(int signal);
  // Reads all output and waits for the launcher to exit; kills it at `deadline`.
  LaunchResult finish(Deadline deadline);

 private:
  // One poll round over the pipes and the pidfd; false once the deadline has passed.
  bool pump(Deadline deadline);
  bool done() const { return outFd_ < 0 && errFd_ < 0 && exited_; }

  pid_t pid_ = -1;
  int outFd_ = -1;
  int errFd_ = -1;
  int pidFd_ = -1;
  bool exited_ = false;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point start_;
  LaunchResult result_;
};

// Runs chorusrun to completion (or to the deadline).
LaunchResult runLauncher(const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(20),
                         const std::vector<std::string>& extraEnv = {});

// A fresh temporary directory, removed when destroyed. Ranks write their PIDs into it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // Creates a FIFO named `name` in the directory.
  void makeFifo(const std::string& name) const;
  // The PIDs in every file named "pid.*" (one number per file).
  std::vector<pid_t> recordedPids() const;

 private:
  std::filesystem::path path_;
};

// True if no process with this PID exists any more (kill(pid, 0) fails with ESRCH).
bool processGone(pid_t pid);

// Lines of `text` that start with "[rank] ", with the prefix removed.
std::vector<std::string> rankLines(const std::string& text, int rank);

}  // namespace chorus::launcher::testing
