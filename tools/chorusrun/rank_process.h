// RankProcess: one rank started by chorusrun, in its own process group, with its stdout and
// stderr connected to pipes that the launcher reads.
//
// Note [Rank process groups]
// Each rank leads a process group of its own (pgid == pid), so that a signal sent to -pid also
// reaches whatever the rank started (a shell's children, data-loader workers) and Ctrl-C at the
// terminal reaches only the launcher, which then decides what the ranks get. The launcher observes
// a rank's exit with waitid(WNOWAIT), leaving the zombie unreaped until the job ends: while the
// zombie exists its pid, and so its process group id, cannot be reused, so signalling the group of
// a rank that has already exited can never hit an unrelated process.
//
// Not thread-safe; the launcher's single event loop owns every RankProcess.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "unique_fd.h"

namespace chorus::launcher {

// The program could not be executed (not found, not executable); error() is the errno.
class ExecError : public Error {
 public:
  ExecError(const std::string& program, int error);
  int error() const { return error_; }

 private:
  int error_;
};

// How a rank ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled
  bool coreDumped = false;

  bool success() const { return !signaled && code == 0; }
  // The launcher's exit code for this outcome: the code, or 128 + signal.
  int launcherExitCode() const { return signaled ? 128 + signal : code; }
  // "rank R exited with code C" or "rank R was killed by signal S (SIGNAME)".
  std::string describe(int rank) const;
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is the program, searched in PATH if it has no '/'
  std::vector<std::string> env;   // "NAME=value"
  bool inheritStdin = false;      // otherwise stdin is /dev/null
  sigset_t signalMask;            // the mask the program starts with
};

class RankProcess {
 public:
  // Starts the program. Throws ExecError if it cannot be executed, chorus::Error for other
  // failures (out of processes or file descriptors).
  RankProcess(int rank, const SpawnSpec& spec);
  // Kills the process group and reaps the rank if that has not happened yet.
  ~RankProcess();
  RankProcess(RankProcess&&) noexcept;
  RankProcess& operator=(RankProcess&&) = delete;
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  // The read ends of the rank's stdout and stderr pipes (non-blocking, close-on-exec), handed over
  // once.
  UniqueFd takeStdout() { return std::move(stdout_); }
  UniqueFd takeStderr() { return std::move(stderr_); }

  // Checks, without blocking or reaping, whether the rank has exited; returns its status the first
  // time it is seen exited, std::nullopt otherwise.
  std::optional<ExitStatus> pollExit();
  bool exited() const { return status_.has_value(); }
  // Sends `signal` to the rank's process group (see Note [Rank process groups]); does nothing once
  // the rank is reaped.
  void signalGroup(int signal) noexcept;
  // Reaps the rank's zombie; call once exited().
  void reap() noexcept;

 private:
  int rank_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::optional<ExitStatus> status_;
  UniqueFd stdout_;
  UniqueFd stderr_;
};

}  // namespace chorus::launcher
