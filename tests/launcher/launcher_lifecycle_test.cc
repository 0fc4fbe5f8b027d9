// chorusrun end to end, part two: output forwarding and how jobs end (success, a failing rank, a
// killed rank, a signal to the launcher, a program that cannot run), always checking that no rank
// or rank child survives the launcher. Ranks record their PIDs as files "pid.*" in a temp dir.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "launcher_process.h"

namespace chorus::launcher::testing {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> shJob(int ranks,
                               const std::string& script,
                               std::vector<std::string> options = {}) {
  options.insert(options.end(), {"-np", std::to_string(ranks), "/bin/sh", "-c", script});
  return options;
}

// Script text: record this rank's shell PID, start `sleep 1000` in the background (same process
// group), record its PID, print "ready", and tell the failing rank through the FIFO "ready" in
// `dir` (if there is one), so that it fails only once the others are surely running.
std::string recordAndSleep(const TempDir& dir) {
  std::string d = dir.str();
  return "echo $$ > " + d + "/pid.sh.$CHORUS_RANK; sleep 1000 & echo $! > " + d +
         "/pid.sleep.$CHORUS_RANK; echo ready; if [ -p " + d + "/ready ]; then echo ready > " + d +
         "/ready; fi; wait";
}

// Script text for the failing rank: wait until `others` ranks have said ready (the FIFO is opened
// read-write, so it never reports end-of-file while the others are still to come), then record
// this rank's PID.
std::string awaitOthers(const TempDir& dir, int others) {
  std::string script = "exec 3<>" + dir.str() + "/ready; ";
  for (int i = 0; i < others; ++i) {
    script += "read line <&3; ";
  }
  return script + "echo $$ > " + dir.str() + "/pid.sh.$CHORUS_RANK; ";
}

void expectAllGone(const TempDir& dir, size_t expectedPids) {
  std::vector<pid_t> pids = dir.recordedPids();
  EXPECT_EQ(pids.size(), expectedPids);
  for (pid_t pid : pids) {
    EXPECT_TRUE(processGone(pid)) << "process " << pid << " outlived chorusrun";
  }
}

size_t countLines(const std::string& text, const std::string& line) {
  size_t count = 0;
  for (size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1)) {
    ++count;
  }
  return count;
}

TEST(LauncherOutput, EveryLineIsPrefixedIncludingAPartialLastLine) {
  LaunchResult result = runLauncher(shJob(2,
                                          "printf 'a\\nb\\n'; printf 'oops\\n' >&2; printf 'tail'; "
                                          "printf 'half' >&2"));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(rankLines(result.out, rank), (std::vector<std::string>{"a", "b", "tail"}));
    EXPECT_EQ(rankLines(result.err, rank), (std::vector<std::string>{"oops", "half"}));
  }
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 6);
  EXPECT_EQ(result.out.back(), '\n');
}

TEST(LauncherOutput, ManyLinesFromManyRanksArriveWholeAndInOrder) {
  constexpr int kRanks = 4;
  constexpr int kLines = 3000;
  LaunchResult result =
      runLauncher(shJob(kRanks, "seq " + std::to_string(kLines) + " | sed \"s/^/$CHORUS_RANK:/\""));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), kRanks * kLines);
  for (int rank = 0; rank < kRanks; ++rank) {
    std::vector<std::string> lines = rankLines(result.out, rank);
    ASSERT_EQ(lines.size(), static_cast<size_t>(kLines));
    for (int i = 0; i < kLines; ++i) {
      ASSERT_EQ(lines[i], std::to_string(rank) + ":" + std::to_string(i + 1));
    }
  }
}

TEST(LauncherOutput, NoTagOutputLeavesLinesAlone) {
  LaunchResult result = runLauncher(shJob(2, "echo plain", {"--no-tag-output"}));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(result.out, "plain\nplain\n");
}

TEST(LauncherLifecycle, EightRanksAllSucceed) {
  LaunchResult result = runLauncher(shJob(8, "echo \"rank $CHORUS_RANK of $CHORUS_SIZE\""));
  EXPECT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(rankLines(result.out, rank),
              std::vector<std::string>{"rank " + std::to_string(rank) + " of 8"});
  }
  EXPECT_EQ(result.err, "");
}

TEST(LauncherLifecycle, FailingRankStopsTheOthers) {
  TempDir dir;
  dir.makeFifo("ready");
  std::string script = "if [ $CHORUS_RANK = 1 ]; then " + awaitOthers(dir, 3) +
                       "echo 'rank 1 gives up' >&2; exit 3; fi; " + recordAndSleep(dir);
  LaunchResult result = runLauncher(shJob(4, script));
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.exitCode, 3);
  EXPECT_NE(result.err.find("chorusrun: rank 1 exited with code 3\n"), std::string::npos)
      << result.err;
  // The rank's own last words come before the launcher's verdict.
  EXPECT_LT(result.err.find("[1] rank 1 gives up"), result.err.find("chorusrun: rank 1"));
  EXPECT_EQ(countLines(result.err, "chorusrun: rank"), 1u) << result.err;
  EXPECT_LT(result.elapsed, 10s);
  expectAllGone(dir, 7);
}

TEST(LauncherLifecycle, KilledRankIsNamedWithItsSignal) {
  TempDir dir;
  dir.makeFifo("ready");
  LaunchResult result =
      runLauncher(shJob(3, "if [ $CHORUS_RANK = 2 ]; then " + awaitOthers(dir, 2) +
                               "kill -9 $$; fi; " + recordAndSleep(dir)));
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.exitCode, 128 + SIGKILL);
  EXPECT_NE(result.err.find("chorusrun: rank 2 was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << result.err;
  EXPECT_LT(result.elapsed, 10s);
  expectAllGone(dir, 5);
}

// The PID rank `rank`'s shell recorded in `dir` (recordAndSleep).
pid_t recordedShell(const TempDir& dir, int rank) {
  std::ifstream file(dir.str() + "/pid.sh." + std::to_string(rank));
  pid_t pid = -1;
  file >> pid;
  return pid;
}

// Waits until `pid` has exited (a zombie: its parent has not reaped it); false at `deadline`.
bool awaitZombie(pid_t pid, Deadline deadline) {
  while (!deadline.expired()) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');  // the state follows the command name
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z')
      return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// A rank is killed, and its peers fail over it and exit before the launcher looks (as on a loaded
// machine): the killed rank is still the cause, named first, and its signal is the job's exit
// status, though the others come first in rank order. The launcher is stopped while it happens,
// so it sees all three exits at once.
TEST(LauncherLifecycle, AKilledRankIsTheCauseThoughItsPeersExitedBeforeTheLauncherLooked) {
  TempDir dir;
  constexpr int kRanks = 3;
  LauncherProcess launcher(shJob(kRanks, "trap 'exit 1' USR1; " + recordAndSleep(dir)));
  ASSERT_TRUE(launcher.waitForStdout(
      [](const std::string& out) { return std::count(out.begin(), out.end(), '\n') == kRanks; },
      Deadline::after(20s)));
  launcher.signal(SIGSTOP);
  const pid_t killed = recordedShell(dir, 2);
  ASSERT_GT(killed, 0);
  kill(killed, SIGKILL);
  ASSERT_TRUE(awaitZombie(killed, Deadline::after(20s)));
  for (int rank : {0, 1}) {
    const pid_t peer = recordedShell(dir, rank);
    ASSERT_GT(peer, 0);
    kill(peer, SIGUSR1);  // its trap exits 1, as a rank reporting the dead peer would
    ASSERT_TRUE(awaitZombie(peer, Deadline::after(20s)));
  }
  launcher.signal(SIGCONT);
  LaunchResult result = launcher.finish(Deadline::after(20s));
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.exitCode, 128 + SIGKILL) << result.err;
  EXPECT_NE(result.err.find("chorusrun: rank 2 was killed by signal 9 (SIGKILL); then rank 0 "
                            "exited with code 1, rank 1 exited with code 1"),
            std::string::npos)
      << result.err;
  expectAllGone(dir, 2 * kRanks);
}

TEST(LauncherLifecycle, SigtermToTheLauncherStopsEverything) {
  TempDir dir;
  constexpr int kRanks = 3;
  LauncherProcess launcher(shJob(kRanks, recordAndSleep(dir)));
  ASSERT_TRUE(launcher.waitForStdout(
      [](const std::string& out) { return std::count(out.begin(), out.end(), '\n') == kRanks; },
      Deadline::after(20s)));
  launcher.signal(SIGTERM);
  LaunchResult result = launcher.finish(Deadline::after(20s));
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.exitCode, 128 + SIGTERM) << result.err;
  expectAllGone(dir, 2 * kRanks);
}

TEST(LauncherLifecycle, RanksIgnoringSigtermAreKilledAfterTheGrace) {
  TempDir dir;
  // The shells ignore SIGINT and SIGTERM, and so does their background sleep (ignored signals are
  // inherited), so only the SIGKILL after the grace ends them.
  LauncherProcess launcher(
      shJob(2, "trap '' INT TERM; " + recordAndSleep(dir), {"--kill-grace", "0.3"}));
  ASSERT_TRUE(launcher.waitForStdout(
      [](const std::string& out) { return std::count(out.begin(), out.end(), '\n') == 2; },
      Deadline::after(20s)));
  launcher.signal(SIGINT);
  LaunchResult result = launcher.finish(Deadline::after(20s));
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.exitCode, 128 + SIGINT) << result.err;
  EXPECT_GE(result.elapsed, 300ms);
  expectAllGone(dir, 4);
}

TEST(LauncherLifecycle, ProgramThatCannotRunExits127) {
  LaunchResult missing = runLauncher({"-np", "2", "no-such-program-chorus"});
  EXPECT_EQ(missing.exitCode, 127);
  EXPECT_NE(missing.err.find(
                "chorusrun: cannot execute 'no-such-program-chorus': No such file or directory"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(runLauncher({"-np", "1", "/nonexistent/dir/prog"}).exitCode, 127);
}

}  // namespace
}  // namespace chorus::launcher::testing
