// Line-by-line forwarding of rank output (see output_forwarder.h). Each read is split at '\n';
// all complete lines it finishes go out in one write(2), so the cost is one read and at most one
// write per 64 KiB of output, plus a copy to insert the prefixes.
#include "output_forwarder.h"

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/check.h"

namespace chorus::launcher {

bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN) {
      // Someone made our stdout non-blocking; wait for room (back-pressure, not loss).
      pollfd writable{fd, POLLOUT, 0};
      ::poll(&writable, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

LineSplitter::LineSplitter(std::string prefix, int destination)
    : prefix_(std::move(prefix)), destination_(destination) {}

void LineSplitter::append(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    size_t newline = data.find('\n');
    size_t room = kMaxLineBytes - partial_.size();
    if (newline == std::string_view::npos && data.size() < room) {
      partial_.append(data);
      break;
    }
    // Complete a line: at the newline, or cut at kMaxLineBytes.
    size_t take = newline == std::string_view::npos ? room : std::min(newline, room);
    out += prefix_;
    out += partial_;
    out.append(data.substr(0, take));
    out += '\n';
    partial_.clear();
    data.remove_prefix(take < data.size() && data[take] == '\n' ? take + 1 : take);
  }
  if (!out.empty()) {
    writeAll(destination_, out);
  }
}

void LineSplitter::finish() {
  if (!partial_.empty()) {
    writeAll(destination_, prefix_ + partial_ + "\n");
    partial_.clear();
  }
}

OutputForwarder::~OutputForwarder() { closeAll(); }

void OutputForwarder::add(UniqueFd source, std::string prefix, int destination) {
  int fd = source.get();
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  CHORUS_SYSCHECK(epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &event));
  streams_.emplace(fd, Stream{std::move(source), LineSplitter(std::move(prefix), destination)});
}

void OutputForwarder::onReadable(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) {
    return;
  }
  char buffer[64 * 1024];
  ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n > 0) {
    it->second.lines.append(std::string_view(buffer, static_cast<size_t>(n)));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close(fd);
  }
}

void OutputForwarder::close(int fd) {
  auto it = streams_.find(fd);
  it->second.lines.finish();
  epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr);
  streams_.erase(it);
}

void OutputForwarder::drainAvailable(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) {
    return;
  }
  // What the pipe holds now (64 KiB by default), not what a writer that outlived its rank keeps
  // adding: at most 16 reads.
  char buffer[64 * 1024];
  for (int i = 0; i < 16; ++i) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      it->second.lines.append(std::string_view(buffer, static_cast<size_t>(n)));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(fd);
      return;
    } else if (errno == EAGAIN) {
      return;
    }
  }
}

void OutputForwarder::closeAll() {
  while (!streams_.empty()) {
    int fd = streams_.begin()->first;
    drainAvailable(fd);
    if (owns(fd)) {
      close(fd);
    }
  }
}

}  // namespace chorus::launcher
