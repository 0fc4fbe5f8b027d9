// Multi-node chorusrun on one machine: two `--nnodes 2` launchers on 127.0.0.1 (a free port) play
// two nodes, and `-H` runs through a fake ssh (fake_ssh.sh) that runs the "remote" launcher
// locally. Checks the ranks' environment, that a failure on either node stops both launchers
// within seconds naming the node and rank, configuration mismatches, token handling, and a real
// chorus program across two launchers. Every run has a deadline.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>

#include "core/net/socket.h"
#include "launcher_process.h"

namespace chorus::launcher::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "multinode-test-token-0123456789";

uint16_t freePort() {
  net::Socket listener = net::listenTcp("127.0.0.1", 0);
  return net::boundPort(listener);
}

std::vector<std::string> nodeArgs(int node, uint16_t port, int nproc, const std::string& script) {
  return {"--nnodes",
          "2",
          "--node-rank",
          std::to_string(node),
          "--master",
          "127.0.0.1:" + std::to_string(port),
          "--nproc-per-node",
          std::to_string(nproc),
          "--kill-grace",
          "1",
          "/bin/sh",
          "-c",
          script};
}

struct TwoNodes {
  LaunchResult node0, node1;
};

TwoNodes runTwoNodes(const std::string& script0,
                     const std::string& script1,
                     int nproc0 = 2,
                     int nproc1 = 2,
                     std::chrono::milliseconds timeout = 30s) {
  uint16_t port = freePort();
  std::vector<std::string> env = {std::string("CHORUS_JOB_TOKEN=") + kToken};
  LauncherProcess node0(nodeArgs(0, port, nproc0, script0), env);
  LauncherProcess node1(nodeArgs(1, port, nproc1, script1), env);
  Deadline deadline = Deadline::after(timeout);
  TwoNodes result;
  result.node1 = node1.finish(deadline);
  result.node0 = node0.finish(deadline);
  return result;
}

std::map<std::string, std::string> rankVariables(const std::string& out, int rank) {
  std::map<std::string, std::string> variables;
  for (const std::string& line : rankLines(out, rank)) {
    size_t equals = line.find('=');
    if (equals != std::string::npos) {
      variables[line.substr(0, equals)] = line.substr(equals + 1);
    }
  }
  return variables;
}

constexpr const char* kPrintEnvironment =
    "env | grep -E '^(CHORUS_[A-Z_]*|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|"
    "MASTER_PORT)='";

void expectRankEnvironment(const std::string& out, int rank, int localRank, int node) {
  auto vars = rankVariables(out, rank);
  EXPECT_EQ(vars["CHORUS_RANK"], std::to_string(rank)) << out;
  EXPECT_EQ(vars["CHORUS_SIZE"], "4");
  EXPECT_EQ(vars["CHORUS_LOCAL_RANK"], std::to_string(localRank));
  EXPECT_EQ(vars["CHORUS_LOCAL_SIZE"], "2");
  EXPECT_EQ(vars["CHORUS_NODE_RANK"], std::to_string(node));
  EXPECT_EQ(vars["CHORUS_NNODES"], "2");
  EXPECT_EQ(vars["RANK"], std::to_string(rank));
  EXPECT_EQ(vars["WORLD_SIZE"], "4");
  EXPECT_EQ(vars["LOCAL_RANK"], std::to_string(localRank));
  EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(vars["MASTER_ADDR"], "127.0.0.1");
  // MASTER_PORT is torch.distributed's, not chorus's store.
  EXPECT_TRUE(std::regex_match(vars["CHORUS_STORE"], std::regex("127\\.0\\.0\\.1:[0-9]+")))
      << vars["CHORUS_STORE"];
  EXPECT_NE(vars["CHORUS_STORE"], "127.0.0.1:" + vars["MASTER_PORT"]);
}

TEST(LauncherMultiNode, TwoLaunchersGiveGlobalRanks) {
  TwoNodes run = runTwoNodes(kPrintEnvironment, kPrintEnvironment);
  ASSERT_EQ(run.node0.exitCode, 0) << run.node0.err;
  ASSERT_EQ(run.node1.exitCode, 0) << run.node1.err;
  expectRankEnvironment(run.node0.out, 0, 0, 0);
  expectRankEnvironment(run.node0.out, 1, 1, 0);
  expectRankEnvironment(run.node1.out, 2, 0, 1);
  expectRankEnvironment(run.node1.out, 3, 1, 1);
  EXPECT_TRUE(rankLines(run.node0.out, 2).empty());
  EXPECT_TRUE(rankLines(run.node1.out, 0).empty());
  EXPECT_EQ(rankVariables(run.node1.out, 3)["CHORUS_JOB_TOKEN"], kToken);
  // Node 0 picked torch's port; every rank of both nodes got it.
  const std::string torchPort = rankVariables(run.node0.out, 0)["MASTER_PORT"];
  EXPECT_GT(std::atoi(torchPort.c_str()), 0);
  EXPECT_EQ(rankVariables(run.node0.out, 1)["MASTER_PORT"], torchPort);
  EXPECT_EQ(rankVariables(run.node1.out, 2)["MASTER_PORT"], torchPort);
  EXPECT_EQ(rankVariables(run.node1.out, 3)["MASTER_PORT"], torchPort);
}

// Ranks that are not failing wait far longer than the test's deadline: only the launchers can
// end them in time.
constexpr const char* kWaitLong = "exec sleep 60";

TEST(LauncherMultiNode, RankExitOnOneNodeStopsBoth) {
  std::string script1 = std::string("if [ $CHORUS_RANK = 3 ]; then exit 3; fi; ") + kWaitLong;
  TwoNodes run = runTwoNodes(kWaitLong, script1, 2, 2, 20s);
  for (const LaunchResult* result : {&run.node0, &run.node1}) {
    EXPECT_FALSE(result->timedOut);
    EXPECT_EQ(result->exitCode, 3) << result->err;
    EXPECT_NE(result->err.find("node 1 rank 3 exited with code 3"), std::string::npos)
        << result->err;
    EXPECT_LT(result->elapsed, 10s);
  }
}

TEST(LauncherMultiNode, KilledRankOnNodeZeroStopsBoth) {
  std::string script0 = std::string("if [ $CHORUS_RANK = 1 ]; then kill -9 $$; fi; ") + kWaitLong;
  TwoNodes run = runTwoNodes(script0, kWaitLong, 2, 2, 20s);
  for (const LaunchResult* result : {&run.node0, &run.node1}) {
    EXPECT_FALSE(result->timedOut);
    EXPECT_EQ(result->exitCode, 128 + SIGKILL) << result->err;
    EXPECT_NE(result->err.find("node 0 rank 1 was killed by signal 9"), std::string::npos)
        << result->err;
    EXPECT_LT(result->elapsed, 10s);
  }
}

TEST(LauncherMultiNode, MismatchedNprocIsAClearError) {
  TwoNodes run = runTwoNodes(kWaitLong, kWaitLong, 2, 3, 20s);
  for (const LaunchResult* result : {&run.node0, &run.node1}) {
    EXPECT_FALSE(result->timedOut);
    EXPECT_NE(result->exitCode, 0);
    EXPECT_NE(result->err.find("--nproc-per-node 3 but node 0 with --nnodes 2 --nproc-per-node 2"),
              std::string::npos)
        << result->err;
  }
}

TEST(LauncherMultiNode, LosingNodeZeroStopsTheOthers) {
  TempDir dir;
  std::string script = "echo $$ > " + dir.str() + "/pid.$CHORUS_RANK; echo started; " + kWaitLong;
  uint16_t port = freePort();
  std::vector<std::string> env = {std::string("CHORUS_JOB_TOKEN=") + kToken};
  LauncherProcess node0(nodeArgs(0, port, 1, script), env);
  LauncherProcess node1(nodeArgs(1, port, 1, script), env);
  Deadline deadline = Deadline::after(20s);
  auto started = [](const std::string& out) { return out.find("started") != std::string::npos; };
  ASSERT_TRUE(node1.waitForStdout(started, deadline));
  node0.signal(SIGKILL);
  LaunchResult result = node1.finish(deadline);
  node0.finish(deadline);
  for (pid_t pid : dir.recordedPids()) {
    kill(pid, SIGKILL);  // node 0's rank, orphaned by its launcher's death
  }
  EXPECT_FALSE(result.timedOut);
  EXPECT_NE(result.exitCode, 0);
  EXPECT_NE(result.err.find("lost the connection to node 0's store"), std::string::npos)
      << result.err;
}

TEST(LauncherMultiNode, SignalToOneLauncherStopsBoth) {
  uint16_t port = freePort();
  std::vector<std::string> env = {std::string("CHORUS_JOB_TOKEN=") + kToken};
  std::string script = std::string("echo started; ") + kWaitLong;
  LauncherProcess node0(nodeArgs(0, port, 1, script), env);
  LauncherProcess node1(nodeArgs(1, port, 1, script), env);
  Deadline deadline = Deadline::after(20s);
  auto started = [](const std::string& out) { return out.find("started") != std::string::npos; };
  ASSERT_TRUE(node0.waitForStdout(started, deadline));
  ASSERT_TRUE(node1.waitForStdout(started, deadline));
  node1.signal(SIGTERM);
  LaunchResult result0 = node0.finish(deadline);
  LaunchResult result1 = node1.finish(deadline);
  EXPECT_EQ(result1.exitCode, 128 + SIGTERM) << result1.err;
  EXPECT_EQ(result0.exitCode, 128 + SIGTERM) << result0.err;
  EXPECT_NE(result0.err.find("node 1's chorusrun got SIGTERM"), std::string::npos) << result0.err;
}

TEST(LauncherMultiNode, NodeRankUsedTwiceIsAnError) {
  uint16_t port = freePort();
  std::vector<std::string> env = {std::string("CHORUS_JOB_TOKEN=") + kToken};
  std::string script = std::string("echo started; ") + kWaitLong;
  LauncherProcess node0(nodeArgs(0, port, 1, script), env);
  LauncherProcess node1(nodeArgs(1, port, 1, script), env);
  Deadline deadline = Deadline::after(20s);
  auto started = [](const std::string& out) { return out.find("started") != std::string::npos; };
  ASSERT_TRUE(node1.waitForStdout(started, deadline));
  LaunchResult again = runLauncher(nodeArgs(1, port, 1, script), 20s, env);
  LaunchResult result0 = node0.finish(deadline);
  LaunchResult result1 = node1.finish(deadline);
  EXPECT_NE(again.exitCode, 0);
  EXPECT_NE(again.err.find("node rank 1 was claimed twice"), std::string::npos) << again.err;
  EXPECT_NE(result0.exitCode, 0);  // the job is stopped too
  EXPECT_NE(result1.exitCode, 0);
}

TEST(LauncherMultiNode, TokenIsRequiredAndItsFileMustBePrivate) {
  uint16_t port = freePort();
  LaunchResult none = runLauncher(nodeArgs(1, port, 1, "true"), 10s, {"CHORUS_JOB_TOKEN="});
  EXPECT_EQ(none.exitCode, 2);
  EXPECT_NE(none.err.find("CHORUS_JOB_TOKEN"), std::string::npos) << none.err;

  TempDir dir;
  std::string file = dir.str() + "/token";
  std::ofstream(file) << "from-a-file\n";
  chmod(file.c_str(), 0644);
  LaunchResult open = runLauncher({"--token-file", file, "-np", "1", "true"}, 10s);
  EXPECT_NE(open.exitCode, 0);
  EXPECT_NE(open.err.find("chmod 600"), std::string::npos) << open.err;

  chmod(file.c_str(), 0600);
  LaunchResult ok = runLauncher({"-np", "1", "/bin/sh", "-c", "echo \"T=$CHORUS_JOB_TOKEN\""}, 10s,
                                {"CHORUS_JOB_TOKEN_FILE=" + file});
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_EQ(rankLines(ok.out, 0), std::vector<std::string>{"T=from-a-file"});
}

std::vector<std::string> fakeSshEnv() {
  std::string bin = std::filesystem::path(CHORUSRUN_PATH).parent_path().string();
  const char* path = std::getenv("PATH");
  return {std::string("CHORUS_RSH=/bin/sh ") + FAKE_SSH_PATH,
          "PATH=" + bin + ":" + (path ? path : "/usr/bin:/bin"), "CHORUS_JOB_TOKEN="};
}

TEST(LauncherMultiNode, HostListStartsLaunchersOverSsh) {
  uint16_t port = freePort();
  // Rank 0 also lists every process's command line: the token must be on none of them.
  std::string script = std::string(kPrintEnvironment) +
                       "; if [ $CHORUS_RANK = 0 ]; then for f in /proc/[0-9]*/cmdline; do "
                       "echo \"CMD $(tr '\\0' ' ' < $f 2>/dev/null)\"; done; fi";
  LaunchResult run = runLauncher(
      {"-H", "a:2,b:2", "--master", "127.0.0.1:" + std::to_string(port), "/bin/sh", "-c", script},
      30s, fakeSshEnv());
  ASSERT_EQ(run.exitCode, 0) << run.err;
  expectRankEnvironment(run.out, 0, 0, 0);
  expectRankEnvironment(run.out, 1, 1, 0);
  expectRankEnvironment(run.out, 2, 0, 1);
  expectRankEnvironment(run.out, 3, 1, 1);
  std::string token = rankVariables(run.out, 0)["CHORUS_JOB_TOKEN"];
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{64}"))) << token;
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_EQ(rankVariables(run.out, rank)["CHORUS_JOB_TOKEN"], token);
  }
  int launchersSeen = 0;
  for (const std::string& line : rankLines(run.out, 0)) {
    if (line.rfind("CMD ", 0) == 0) {
      EXPECT_EQ(line.find(token), std::string::npos) << line;
      launchersSeen += line.find("--token-stdin") != std::string::npos;
    }
  }
  EXPECT_GE(launchersSeen, 2) << run.out;  // the scan did see both launchers
}

// Waits until `pid` has exited (it need not be a child); false at the deadline.
bool waitGone(pid_t pid, Deadline deadline) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    return errno == ESRCH;
  }
  pollfd entry{fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&entry, 1, deadline.pollTimeoutMs());
  } while (ready < 0 && errno == EINTR);
  close(fd);
  return ready > 0;
}

// Over real ssh a signal to the coordinator reaches only the local ssh; the launchers must learn
// of it through the store. FAKE_SSH_DETACH runs them in sessions of their own to show that.
TEST(LauncherMultiNode, SignalToCoordinatorStopsDetachedLaunchers) {
  TempDir dir;
  uint16_t port = freePort();
  std::string script = "echo $$ > " + dir.str() + "/pid.rank.$CHORUS_RANK; echo $PPID > " +
                       dir.str() + "/pid.launcher.$CHORUS_RANK; echo started; " + kWaitLong;
  std::vector<std::string> env = fakeSshEnv();
  env.push_back("FAKE_SSH_DETACH=1");
  LauncherProcess coordinator(
      {"-H", "a:1,b:1", "--master", "127.0.0.1:" + std::to_string(port), "/bin/sh", "-c", script},
      env);
  Deadline deadline = Deadline::after(20s);
  auto bothStarted = [](const std::string& out) {
    return out.find("started") != out.rfind("started");
  };
  ASSERT_TRUE(coordinator.waitForStdout(bothStarted, deadline));
  coordinator.signal(SIGTERM);
  LaunchResult result = coordinator.finish(deadline);
  EXPECT_NE(result.exitCode, 0);
  std::vector<pid_t> pids = dir.recordedPids();
  EXPECT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) {
    EXPECT_TRUE(waitGone(pid, deadline)) << "process " << pid << " outlived the job";
    kill(pid, SIGKILL);
  }
}

TEST(LauncherMultiNode, HostListFailureAndUnequalSlots) {
  uint16_t port = freePort();
  LaunchResult failed =
      runLauncher({"-H", "a:1,b:1", "--master", "127.0.0.1:" + std::to_string(port), "/bin/sh",
                   "-c", std::string("if [ $CHORUS_RANK = 1 ]; then exit 4; fi; ") + kWaitLong},
                  20s, fakeSshEnv());
  EXPECT_EQ(failed.exitCode, 4) << failed.err;
  EXPECT_NE(failed.err.find("node 1 rank 1 exited with code 4"), std::string::npos) << failed.err;
  EXPECT_LT(failed.elapsed, 10s);

  LaunchResult unequal = runLauncher({"-H", "a:2,b:3", "true"}, 10s, fakeSshEnv());
  EXPECT_NE(unequal.exitCode, 0);
  EXPECT_NE(unequal.err.find("same number of slots"), std::string::npos) << unequal.err;
}

TEST(LauncherMultiNode, CollectivesAcrossTwoLaunchers) {
  ASSERT_TRUE(std::filesystem::exists(COLLECTIVES_CHECK_PATH)) << "built as a dependency";
  uint16_t port = freePort();
  std::vector<std::string> env = {std::string("CHORUS_JOB_TOKEN=") + kToken};
  auto args = [&](int node) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(node),
                                    "--master",
                                    "127.0.0.1:" + std::to_string(port),
                                    "-np",
                                    "2",
                                    COLLECTIVES_CHECK_PATH};
  };
  LauncherProcess node0(args(0), env);
  LauncherProcess node1(args(1), env);
  Deadline deadline = Deadline::after(60s);
  LaunchResult result1 = node1.finish(deadline);
  LaunchResult result0 = node0.finish(deadline);
  EXPECT_EQ(result0.exitCode, 0) << result0.err;
  EXPECT_EQ(result1.exitCode, 0) << result1.err;
  EXPECT_NE((result0.out + result1.out).find("collectives_check: OK on 4 ranks"), std::string::npos)
      << result0.out << result1.out;
}

}  // namespace
}  // namespace chorus::launcher::testing
