// ProcessWatch: a pidfd where the kernel gives one, else kill(pid, 0). See process_watch.h.
#include "core/process_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace chorus {
namespace {

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

ProcessWatch::ProcessWatch(pid_t pid) : pid_(pid), pidfd_(pid > 0 ? openPidfd(pid) : -1) {}

ProcessWatch::~ProcessWatch() {
  if (pidfd_ >= 0)
    ::close(pidfd_);
}

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(std::exchange(other.pid_, 0)), pidfd_(std::exchange(other.pidfd_, -1)) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  if (this != &other) {
    if (pidfd_ >= 0)
      ::close(pidfd_);
    pid_ = std::exchange(other.pid_, 0);
    pidfd_ = std::exchange(other.pidfd_, -1);
  }
  return *this;
}

bool ProcessWatch::gone() const {
  if (pid_ <= 0)
    return false;
  if (pidfd_ >= 0) {
    pollfd entry{pidfd_, POLLIN, 0};
    int ready = ::poll(&entry, 1, 0);
    return ready > 0 && (entry.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  return ::kill(pid_, 0) != 0 && errno == ESRCH;
}

}  // namespace chorus
