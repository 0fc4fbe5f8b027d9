// A line-based control channel between a job rank and the test driver that attacks the job
// (attack_running_job.py): a Unix-domain stream socket that the driver listens on. It carries
// addresses and commands only, never the job token.
//
// Every read takes a deadline and throws chorus::TimeoutError when it passes, so a driver that
// went away fails the job instead of hanging it. Not thread-safe: one rank thread uses it.
#pragma once

#include <optional>
#include <string>

#include "core/deadline.h"
#include "core/net/socket.h"

namespace chorus::security {

class ControlChannel {
 public:
  // Connects to the driver's socket at `path`.
  explicit ControlChannel(const std::string& path);

  void send(const std::string& line);
  // The next line (without '\n'); TimeoutError at `deadline`, chorus::Error when the driver hung
  // up.
  std::string receive(Deadline deadline);
  // The next line if one has fully arrived already; never blocks.
  std::optional<std::string> poll();

 private:
  std::optional<std::string> takeLine();
  // Reads what is available, waiting at most until `deadline`; false if nothing arrived.
  bool fill(Deadline deadline);

  net::Socket socket_;
  std::string buffer_;
};

}  // namespace chorus::security
