// Starting, watching and signalling one rank (see rank_process.h).
//
// posix_spawnp, not fork: the launcher runs the store server's threads, and after fork only
// async-signal-safe calls are allowed; glibc's posix_spawn also reports a failed exec as its
// return value (it uses CLONE_VFORK), which gives the "cannot execute" error without a side pipe.
#include "rank_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "core/check.h"

namespace chorus::launcher {
namespace {

// Closes a posix_spawn object on every path.
template <typename T, int (*Destroy)(T*)>
struct SpawnObject {
  T value;
  explicit SpawnObject(int (*init)(T*)) {
    int error = init(&value);
    if (error != 0) {
      detail::throwSystemError("posix_spawn init", error, __FILE__, __LINE__);
    }
  }
  ~SpawnObject() { Destroy(&value); }
};

void spawnCheck(int error, const char* call) {
  if (error != 0) {
    detail::throwSystemError(call, error, __FILE__, __LINE__);
  }
}

std::vector<char*> cStrings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) {
    pointers.push_back(const_cast<char*>(s.c_str()));
  }
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

ExecError::ExecError(const std::string& program, int error)
    : Error("cannot execute '" + program + "': " + std::strerror(error)), error_(error) {}

std::string ExitStatus::describe(int rank) const {
  std::string text = "rank " + std::to_string(rank);
  if (!signaled) {
    return text + " exited with code " + std::to_string(code);
  }
  const char* name = sigabbrev_np(signal);
  text += " was killed by signal " + std::to_string(signal) + " (SIG" + (name ? name : "?") + ")";
  if (coreDumped) {
    text += ", core dumped";
  }
  return text;
}

RankProcess::RankProcess(int rank, const SpawnSpec& spec) : rank_(rank) {
  CHORUS_ASSERT(!spec.argv.empty());
  int out[2];
  int err[2];
  CHORUS_SYSCHECK(pipe2(out, O_CLOEXEC));
  UniqueFd outRead(out[0]), outWrite(out[1]);
  CHORUS_SYSCHECK(pipe2(err, O_CLOEXEC));
  UniqueFd errRead(err[0]), errWrite(err[1]);

  SpawnObject<posix_spawn_file_actions_t, posix_spawn_file_actions_destroy> actions(
      posix_spawn_file_actions_init);
  // dup2 clears close-on-exec on the copy; every other launcher fd is close-on-exec.
  spawnCheck(posix_spawn_file_actions_adddup2(&actions.value, outWrite.get(), STDOUT_FILENO),
             "posix_spawn_file_actions_adddup2");
  spawnCheck(posix_spawn_file_actions_adddup2(&actions.value, errWrite.get(), STDERR_FILENO),
             "posix_spawn_file_actions_adddup2");
  if (!spec.inheritStdin) {
    spawnCheck(
        posix_spawn_file_actions_addopen(&actions.value, STDIN_FILENO, "/dev/null", O_RDONLY, 0),
        "posix_spawn_file_actions_addopen");
  }

  SpawnObject<posix_spawnattr_t, posix_spawnattr_destroy> attr(posix_spawnattr_init);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);  // The launcher ignores SIGPIPE; programs get the default.
  spawnCheck(posix_spawnattr_setflags(&attr.value, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                       POSIX_SPAWN_SETSIGDEF),
             "posix_spawnattr_setflags");
  spawnCheck(posix_spawnattr_setpgroup(&attr.value, 0), "posix_spawnattr_setpgroup");
  spawnCheck(posix_spawnattr_setsigmask(&attr.value, &spec.signalMask),
             "posix_spawnattr_setsigmask");
  spawnCheck(posix_spawnattr_setsigdefault(&attr.value, &defaults),
             "posix_spawnattr_setsigdefault");

  std::vector<char*> argv = cStrings(spec.argv);
  std::vector<char*> envp = cStrings(spec.env);
  int error = posix_spawnp(&pid_, argv[0], &actions.value, &attr.value, argv.data(), envp.data());
  if (error != 0) {
    pid_ = -1;
    if (error == EAGAIN || error == ENOMEM) {
      detail::throwSystemError("posix_spawnp", error, __FILE__, __LINE__);
    }
    throw ExecError(spec.argv[0], error);
  }
  CHORUS_SYSCHECK(fcntl(outRead.get(), F_SETFL, O_NONBLOCK));
  CHORUS_SYSCHECK(fcntl(errRead.get(), F_SETFL, O_NONBLOCK));
  stdout_ = std::move(outRead);
  stderr_ = std::move(errRead);
}

RankProcess::RankProcess(RankProcess&& other) noexcept
    : rank_(other.rank_),
      pid_(other.pid_),
      reaped_(other.reaped_),
      status_(other.status_),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)) {
  other.pid_ = -1;
}

RankProcess::~RankProcess() {
  if (pid_ > 0 && !reaped_) {
    signalGroup(SIGKILL);
    int status;
    while (waitpid(pid_, &status, 0) == -1 && errno == EINTR) {
    }
  }
}

std::optional<ExitStatus> RankProcess::pollExit() {
  if (pid_ <= 0 || status_) {
    return std::nullopt;
  }
  siginfo_t info{};
  if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == -1 || info.si_pid == 0) {
    return std::nullopt;
  }
  ExitStatus status;
  if (info.si_code == CLD_EXITED) {
    status.code = info.si_status;
  } else {
    status.signaled = true;
    status.signal = info.si_status;
    status.coreDumped = info.si_code == CLD_DUMPED;
  }
  status_ = status;
  return status;
}

void RankProcess::signalGroup(int signal) noexcept {
  if (pid_ > 0 && !reaped_) {
    kill(-pid_, signal);  // ESRCH: the group is already gone.
  }
}

void RankProcess::reap() noexcept {
  if (pid_ > 0 && !reaped_) {
    int status;
    while (waitpid(pid_, &status, 0) == -1 && errno == EINTR) {
    }
    reaped_ = true;
  }
}

}  // namespace chorus::launcher
