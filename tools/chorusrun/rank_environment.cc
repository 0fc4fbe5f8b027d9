// Builds each rank's environment (see rank_environment.h).
#include "rank_environment.h"

#include <array>
#include <string_view>
#include <utility>

#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace chorus::launcher {
namespace {

// Every variable chorusrun sets (but CHORUS_TIMEOUT, which is inherited unless --timeout is
// given); copies inherited from an enclosing launch are dropped first.
constexpr std::array<std::string_view, 21> kLaunchVariables = {
    "CHORUS_RANK",         "CHORUS_SIZE",   "CHORUS_LOCAL_RANK",     "CHORUS_LOCAL_SIZE",
    "CHORUS_NODE_RANK",    "CHORUS_NNODES", "CHORUS_STORE",          "CHORUS_JOB_TOKEN",
    "CHORUS_TOKEN_FILE",   "CHORUS_JOB_ID", "CHORUS_LAUNCHER",       "RANK",
    "WORLD_SIZE",          "LOCAL_RANK",    "LOCAL_WORLD_SIZE",      "GROUP_RANK",
    "MASTER_ADDR",         "MASTER_PORT",   "CHORUS_JOB_TOKEN_FILE", "CHORUS_BIND_ADDR",
    "CHORUS_RECORDER_DIR",
};

bool replaced(std::string_view entry, bool timeoutGiven) {
  std::string_view name = entry.substr(0, entry.find('='));
  if (timeoutGiven && name == "CHORUS_TIMEOUT") {
    return true;
  }
  for (std::string_view variable : kLaunchVariables) {
    if (name == variable) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> rankEnvironment(const JobEnvironment& job,
                                         int localRank,
                                         const char* const* base) {
  std::vector<std::string> env;
  for (const char* const* entry = base; entry != nullptr && *entry != nullptr; ++entry) {
    if (!replaced(*entry, job.timeout.has_value())) {
      env.emplace_back(*entry);
    }
  }
  int rank = job.nodeRank * job.localSize + localRank;
  std::string port = std::to_string(job.storePort);
  std::vector<std::pair<const char*, std::string>> launch = {
      {"CHORUS_RANK", std::to_string(rank)},
      {"CHORUS_SIZE", std::to_string(job.size)},
      {"CHORUS_LOCAL_RANK", std::to_string(localRank)},
      {"CHORUS_LOCAL_SIZE", std::to_string(job.localSize)},
      {"CHORUS_NODE_RANK", std::to_string(job.nodeRank)},
      {"CHORUS_NNODES", std::to_string(job.nnodes)},
      {"CHORUS_STORE", job.storeHost + ":" + port},
      {"CHORUS_JOB_TOKEN", job.token},
      {"CHORUS_JOB_ID", job.jobId},
      {"CHORUS_LAUNCHER", "chorusrun"},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(job.size)},
      {"LOCAL_RANK", std::to_string(localRank)},
      {"LOCAL_WORLD_SIZE", std::to_string(job.localSize)},
      {"GROUP_RANK", std::to_string(job.nodeRank)},
      {"MASTER_ADDR", job.storeHost},
      {"MASTER_PORT", std::to_string(job.torchPort)},
  };
  if (!job.recorderDir.empty())
    launch.emplace_back("CHORUS_RECORDER_DIR", job.recorderDir);
  if (job.timeout) {
    launch.emplace_back("CHORUS_TIMEOUT", *job.timeout);
  }
  if (!job.bindHost.empty()) {
    launch.emplace_back("CHORUS_BIND_ADDR", job.bindHost);
  }
  for (auto& [name, value] : launch) {
    env.push_back(std::string(name) + "=" + value);
  }
  return env;
}

uint16_t freePort(const std::string& host) { return net::boundPort(net::listenTcp(host, 0)); }

std::string newJobId() {
  constexpr size_t kJobIdDigits = 16;
  return net::generateToken().substr(0, kJobIdDigits);
}

}  // namespace chorus::launcher
