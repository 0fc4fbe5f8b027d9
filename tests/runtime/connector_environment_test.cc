// The connector chooses its bootstrap from the environment: torchrun-style variables (rank 0
// serves the store at MASTER_ADDR:MASTER_PORT) and no launcher at all (a single rank). Real
// processes run tests/runtime/collectives_check.cc.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

extern char** environ;

namespace {

// A port that was free a moment ago (bound, read, released).
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// The current environment without launcher variables, plus `extra`.
std::vector<std::string> environmentWith(const std::vector<std::string>& extra) {
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string variable = *entry;
    bool launcher = variable.rfind("CHORUS_", 0) == 0 || variable.rfind("RANK=", 0) == 0 ||
                    variable.rfind("WORLD_SIZE=", 0) == 0 || variable.rfind("MASTER_", 0) == 0 ||
                    variable.rfind("LOCAL_", 0) == 0;
    if (!launcher)
      result.push_back(variable);
  }
  result.insert(result.end(), extra.begin(), extra.end());
  return result;
}

pid_t spawn(const std::vector<std::string>& environment) {
  std::vector<char*> envp;
  for (const auto& variable : environment) envp.push_back(const_cast<char*>(variable.c_str()));
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(COLLECTIVES_CHECK_PATH), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, COLLECTIVES_CHECK_PATH, nullptr, nullptr, argv, envp.data()), 0);
  return pid;
}

// Waits for every child; kills them all if any is still running after 60 s.
std::vector<int> waitAll(const std::vector<pid_t>& pids) {
  std::vector<std::future<int>> statuses;
  for (pid_t pid : pids) {
    statuses.push_back(std::async(std::launch::async, [pid] {
      int status = 0;
      while (waitpid(pid, &status, 0) == -1 && errno == EINTR) {
      }
      return status;
    }));
  }
  std::vector<int> result;
  for (auto& status : statuses) {
    if (status.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "a rank is still running after 60 s; killing all";
      for (pid_t pid : pids) kill(pid, SIGKILL);
    }
    result.push_back(status.get());
  }
  return result;
}

TEST(ConnectorEnvironmentTest, TorchrunStyleVariablesBootstrapAJob) {
  const int port = freePort();
  const int size = 3;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    pids.push_back(spawn(environmentWith(
        {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(size),
         "LOCAL_RANK=" + std::to_string(rank), "LOCAL_WORLD_SIZE=" + std::to_string(size),
         "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
         "CHORUS_JOB_TOKEN=torchrun-style-test-token", "CHORUS_TIMEOUT=30"})));
  }
  for (int status : waitAll(pids)) {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
}

TEST(ConnectorEnvironmentTest, NoLauncherMeansASingleRank) {
  auto statuses = waitAll({spawn(environmentWith({}))});
  EXPECT_TRUE(WIFEXITED(statuses[0]) && WEXITSTATUS(statuses[0]) == 0);
}

}  // namespace
