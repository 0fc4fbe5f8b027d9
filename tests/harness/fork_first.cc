// ForkFirst (see fork_first.h).
#include "harness/fork_first.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <stdexcept>

namespace chorus::testing {
namespace {

// Waits until `fd` has `port` (or EOF, or the deadline). Returns false when it got nothing.
bool readPort(int fd, uint16_t* port, std::chrono::seconds deadline) {
  pollfd ready{fd, POLLIN, 0};
  int polled;
  do {
    polled = ::poll(&ready, 1, static_cast<int>(deadline.count() * 1000));
  } while (polled < 0 && errno == EINTR);
  return polled == 1 && ::read(fd, port, sizeof *port) == sizeof *port;
}

}  // namespace

ForkFirst::ForkFirst(std::string token, std::chrono::seconds deadline)
    : token_(std::move(token)), deadline_(deadline) {}

ForkFirst::~ForkFirst() {
  for (int fd : pipes_) ::close(fd);
}

pid_t ForkFirst::fork(const std::function<int(const net::Address& store)>& body) {
  int ends[2];
  if (::pipe(ends) != 0)
    throw std::runtime_error("ForkFirst: pipe failed");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(ends[0]);
    ::close(ends[1]);
    throw std::runtime_error("ForkFirst: fork failed");
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(ends[1]);
    for (int fd : pipes_) ::close(fd);  // earlier children's pipes: only the parent writes them
    uint16_t port = 0;
    int status = 3;
    if (readPort(ends[0], &port, deadline_)) {
      try {
        status = body(net::Address{"127.0.0.1", port});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ForkFirst: child %d threw: %s\n", ::getpid(), e.what());
        status = 1;
      } catch (...) {
        std::fprintf(stderr, "ForkFirst: child %d threw something not a std::exception\n",
                     ::getpid());
        status = 1;
      }
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
  ::close(ends[0]);
  pipes_.push_back(ends[1]);
  return pid;
}

net::Address ForkFirst::start() {
  server_ = std::make_unique<store::TcpStoreServer>("127.0.0.1", 0, token_);
  const uint16_t port = server_->port();
  for (int fd : pipes_) {
    if (::write(fd, &port, sizeof port) != sizeof port)
      std::fprintf(stderr, "ForkFirst: a child left before it got the store's address\n");
    ::close(fd);
  }
  pipes_.clear();
  return net::Address{"127.0.0.1", port};
}

}  // namespace chorus::testing
