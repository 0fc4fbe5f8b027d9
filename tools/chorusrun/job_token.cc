// Finding the job token (see job_token.h).
#include "job_token.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "chorus/error.h"
#include "core/deadline.h"
#include "core/net/handshake.h"

namespace chorus::launcher {
namespace {

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) {
    return "";
  }
  size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

}  // namespace

std::string readTokenFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw InvalidArgumentError("cannot open the token file " + path + ": " + std::strerror(errno));
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || (info.st_mode & 077) != 0) {
    ::close(fd);
    throw InvalidArgumentError("the token file " + path +
                               " is accessible to group or others; run chmod 600 " + path);
  }
  std::string text;
  char buffer[4096];
  ssize_t got;
  while ((got = ::read(fd, buffer, sizeof(buffer))) > 0 && text.size() < (1 << 16)) {
    text.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  std::string token = trim(text.substr(0, text.find('\n')));
  if (token.empty()) {
    throw InvalidArgumentError("the token file " + path + " is empty");
  }
  return token;
}

std::string readTokenFromStdin(std::chrono::milliseconds timeout) {
  Deadline deadline = Deadline::after(timeout);
  std::string line;
  while (line.find('\n') == std::string::npos) {
    pollfd entry{STDIN_FILENO, POLLIN, 0};
    int ready = ::poll(&entry, 1, deadline.pollTimeoutMs());
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready == 0) {
      throw InvalidArgumentError("--token-stdin: no token arrived on stdin in time");
    }
    char c[256];
    ssize_t got = ::read(STDIN_FILENO, c, sizeof(c));
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      break;
    }
    line.append(c, static_cast<size_t>(got));
  }
  std::string token = trim(line.substr(0, line.find('\n')));
  if (token.empty()) {
    throw InvalidArgumentError("--token-stdin: stdin held no token");
  }
  return token;
}

std::optional<std::string> findJobToken(const LaunchOptions& options) {
  if (options.tokenStdin) {
    return readTokenFromStdin(options.connectTimeout);
  }
  if (!options.tokenFile.empty()) {
    return readTokenFile(options.tokenFile);
  }
  bool coordinator = !options.hosts.empty() || !options.hostfile.empty();
  if (options.nnodes > 1 || coordinator) {
    if (const char* token = std::getenv("CHORUS_JOB_TOKEN"); token && *token) {
      return std::string(token);
    }
  }
  if (options.nnodes > 1) {
    return std::nullopt;
  }
  return net::generateToken();
}

std::string missingTokenMessage() {
  return "a multi-node job needs the same job token on every node, and none was given; e.g. "
         "export CHORUS_JOB_TOKEN=$(openssl rand -hex 32) on every node, or put it in a file "
         "(chmod 600) and pass --token-file FILE (or CHORUS_JOB_TOKEN_FILE=FILE)";
}

}  // namespace chorus::launcher
