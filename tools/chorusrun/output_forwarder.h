// OutputForwarder: copies every rank's stdout and stderr to the launcher's own, one whole line at a
// time, each line prefixed with "[rank] " (or nothing, with --no-tag-output).
//
// Lines from different ranks never interleave mid-line: only the launcher's event loop writes, and
// it writes whole lines. A partial last line is completed with '\n' when its pipe closes. A line
// longer than kMaxLineBytes is cut there, so a rank that never prints '\n' cannot grow the
// launcher's memory without bound. Writes to the launcher's stdout/stderr block while the reader
// is slow (back-pressure, never loss); if the reader has gone (EPIPE), output is dropped.
//
// Not thread-safe: owned by the launcher's single event loop.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "unique_fd.h"

namespace chorus::launcher {

inline constexpr size_t kMaxLineBytes = 1 << 20;

// Splits one stream into prefixed lines and writes them to `destination`.
class LineSplitter {
 public:
  LineSplitter(std::string prefix, int destination);
  void append(std::string_view data);
  // Writes a pending partial line, completed with '\n'.
  void finish();

 private:
  std::string prefix_;
  int destination_;
  std::string partial_;
};

class OutputForwarder {
 public:
  // Registers streams with `epollFd` (level-triggered EPOLLIN, event data = the fd).
  explicit OutputForwarder(int epollFd) : epollFd_(epollFd) {}
  ~OutputForwarder();

  void add(UniqueFd source, std::string prefix, int destination);
  bool owns(int fd) const { return streams_.count(fd) != 0; }
  // Reads what `fd` has (one read of up to 64 KiB); at EOF, flushes and closes the stream.
  void onReadable(int fd);
  // Forwards what `fd` holds now (up to 1 MiB), e.g. a rank's last words before saying it failed.
  void drainAvailable(int fd);
  size_t openStreams() const { return streams_.size(); }
  // Flushes and closes every stream that is still open (the drain deadline passed).
  void closeAll();

 private:
  struct Stream {
    UniqueFd source;
    LineSplitter lines;
  };
  void close(int fd);

  int epollFd_;
  std::map<int, Stream> streams_;
};

// Writes all of `data` to `fd`, retrying short writes and EINTR and waiting out EAGAIN. Returns
// false if the fd is broken (EPIPE and the like); the caller drops the output.
bool writeAll(int fd, std::string_view data);

}  // namespace chorus::launcher
