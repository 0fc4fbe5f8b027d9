// The job side of the driver's control socket (see control_channel.h).
#include "control_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::security {

ControlChannel::ControlChannel(const std::string& path) {
  socket_ = net::Socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  CHORUS_SYSCHECK(socket_.fd());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  CHORUS_CHECK_ARG(path.size() < sizeof(address.sun_path), "control socket path too long: ", path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  CHORUS_SYSCHECK(::connect(socket_.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)));
}

void ControlChannel::send(const std::string& line) {
  std::string framed = line + "\n";
  net::sendAll(socket_.fd(), framed.data(), framed.size(),
               Deadline::after(std::chrono::seconds(10)));
}

std::optional<std::string> ControlChannel::takeLine() {
  size_t end = buffer_.find('\n');
  if (end == std::string::npos) {
    return std::nullopt;
  }
  std::string line = buffer_.substr(0, end);
  buffer_.erase(0, end + 1);
  return line;
}

bool ControlChannel::fill(Deadline deadline) {
  pollfd entry{socket_.fd(), POLLIN, 0};
  int ready = ::poll(&entry, 1, deadline.pollTimeoutMs());
  if (ready <= 0) {
    return false;
  }
  char chunk[4096];
  ssize_t got = ::read(socket_.fd(), chunk, sizeof(chunk));
  if (got <= 0) {
    throw Error("the attack driver closed the control channel");
  }
  buffer_.append(chunk, static_cast<size_t>(got));
  return true;
}

std::string ControlChannel::receive(Deadline deadline) {
  while (true) {
    if (auto line = takeLine()) {
      return *line;
    }
    if (!fill(deadline) && deadline.expired()) {
      throw TimeoutError("no command from the attack driver in time");
    }
  }
}

std::optional<std::string> ControlChannel::poll() {
  if (auto line = takeLine()) {
    return line;
  }
  while (fill(Deadline::after(std::chrono::milliseconds(0)))) {
    if (auto line = takeLine()) {
      return line;
    }
  }
  return std::nullopt;
}

}  // namespace chorus::security
