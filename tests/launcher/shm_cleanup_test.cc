// CHORUS_JOB_ID and the removal of a job's shared-memory segments (tools/chorusrun/shm_cleanup.h),
// end to end: /bin/sh ranks create files /dev/shm/chorus-$CHORUS_JOB_ID-..., as a chorus transport
// would, and the tests check that none is left once chorusrun has exited, however the job ended
// (success, a rank killed with SIGKILL, a signal to the launcher), that another job's segments are
// left alone, and that every rank (on every node) sees one fresh 16-hex-digit id. A unit test
// checks the prefix matching of removeJobSharedMemory on a private directory. Every run has a
// deadline; waiting for the ranks uses a FIFO and the launcher's output, never a sleep.
#include "shm_cleanup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "core/net/socket.h"
#include "launcher_process.h"
#include "rank_environment.h"

namespace chorus::launcher::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const fs::path kShm = "/dev/shm";

std::vector<std::string> shJob(int ranks,
                               const std::string& script,
                               std::vector<std::string> options = {}) {
  options.insert(options.end(), {"-np", std::to_string(ranks), "/bin/sh", "-c", script});
  return options;
}

// The names in `directory`, sorted.
std::set<std::string> entries(const fs::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// The entries of /dev/shm that belong to job `id`.
std::set<std::string> segmentsOf(const std::string& id) {
  std::set<std::string> names;
  for (const std::string& name : entries(kShm)) {
    if (name.rfind("chorus-" + id + "-", 0) == 0) {
      names.insert(name);
    }
  }
  return names;
}

// A file in /dev/shm that the test owns, removed when destroyed.
class OwnedFile {
 public:
  explicit OwnedFile(fs::path path) : path_(std::move(path)) { std::ofstream(path_) << "x"; }
  ~OwnedFile() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The distinct values of "NAME=value" lines that any rank printed.
std::set<std::string> printedValues(const std::string& out, const std::string& name, int ranks) {
  std::set<std::string> values;
  for (int rank = 0; rank < ranks; ++rank) {
    for (const std::string& line : rankLines(out, rank)) {
      if (line.rfind(name + "=", 0) == 0) {
        values.insert(line.substr(name.size() + 1));
      }
    }
  }
  return values;
}

// The last line a rank printed ("" if none).
std::string lastLine(const std::string& out, int rank) {
  std::vector<std::string> lines = rankLines(out, rank);
  return lines.empty() ? "" : lines.back();
}

const std::regex kSixteenHex("[0-9a-f]{16}");

// Each rank creates its segment, proves it exists and prints the job id.
constexpr const char* kCreateSegment =
    "seg=/dev/shm/chorus-$CHORUS_JOB_ID-x$CHORUS_RANK; : > $seg && test -f $seg && "
    "echo \"ID=$CHORUS_JOB_ID\" && echo created";

#define SKIP_WITHOUT_DEV_SHM()                     \
  if (!fs::is_directory(kShm)) {                   \
    GTEST_SKIP() << "no /dev/shm on this machine"; \
  }

TEST(ShmCleanup, RemovesExactlyTheJobsPrefix) {
  TempDir dir;
  for (const char* name : {"chorus-abc-1", "chorus-abc-x-y", "chorus-abcd-1", "chorus-abc",
                           "chorus-ab-1", "other-chorus-abc-1", "unrelated"}) {
    std::ofstream(dir.path() / name) << "x";
  }
  EXPECT_TRUE(removeJobSharedMemory("abc", dir.str()).empty());
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"chorus-abcd-1", "chorus-abc", "chorus-ab-1",
                                   "other-chorus-abc-1", "unrelated"}));
  // No prefix at all for an empty id: nothing goes.
  EXPECT_TRUE(removeJobSharedMemory("", dir.str()).empty());
  EXPECT_EQ(entries(dir.path()).size(), 5u);
}

TEST(ShmCleanup, MissingDirectoryIsFineAndFailuresAreNamed) {
  TempDir dir;
  EXPECT_TRUE(removeJobSharedMemory("abc", (dir.path() / "absent").string()).empty());
  fs::create_directory(dir.path() / "chorus-abc-dir");  // unlink cannot remove a directory
  std::vector<std::string> failures = removeJobSharedMemory("abc", dir.str());
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].find("chorus-abc-dir"), std::string::npos) << failures[0];
}

TEST(ShmCleanup, EveryRankSeesOneFreshJobId) {
  constexpr int kRanks = 3;
  LaunchResult first =
      runLauncher(shJob(kRanks, "echo \"ID=$CHORUS_JOB_ID\""), 20s, {"CHORUS_JOB_ID=stale"});
  ASSERT_EQ(first.exitCode, 0) << first.err;
  std::set<std::string> ids = printedValues(first.out, "ID", kRanks);
  ASSERT_EQ(ids.size(), 1u) << first.out;
  EXPECT_TRUE(std::regex_match(*ids.begin(), kSixteenHex)) << *ids.begin();
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(rankLines(first.out, rank).size(), 1u) << first.out;
  }

  LaunchResult second = runLauncher(shJob(1, "echo \"ID=$CHORUS_JOB_ID\""));
  ASSERT_EQ(second.exitCode, 0) << second.err;
  std::set<std::string> again = printedValues(second.out, "ID", 1);
  ASSERT_EQ(again.size(), 1u) << second.out;
  EXPECT_TRUE(std::regex_match(*again.begin(), kSixteenHex)) << *again.begin();
  EXPECT_NE(*again.begin(), *ids.begin());
}

TEST(ShmCleanup, SegmentsAreRemovedAfterASuccessfulJob) {
  SKIP_WITHOUT_DEV_SHM();
  constexpr int kRanks = 3;
  std::string otherId = newJobId();  // an id no chorusrun job has
  OwnedFile other(kShm / ("chorus-" + otherId + "-y"));
  LaunchResult result = runLauncher(shJob(kRanks, kCreateSegment));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(lastLine(result.out, rank), "created") << result.out;
  }
  std::set<std::string> ids = printedValues(result.out, "ID", kRanks);
  ASSERT_EQ(ids.size(), 1u) << result.out;
  EXPECT_NE(*ids.begin(), otherId);
  EXPECT_EQ(segmentsOf(*ids.begin()), std::set<std::string>{});
  EXPECT_TRUE(fs::exists(other.path())) << "another job's segment was removed";
}

TEST(ShmCleanup, SegmentsAreRemovedAfterARankIsKilled) {
  SKIP_WITHOUT_DEV_SHM();
  TempDir dir;
  dir.makeFifo("fifo");
  std::string fifo = (dir.path() / "fifo").string();
  std::string otherId = newJobId();
  OwnedFile other(kShm / ("chorus-" + otherId + "-y"));
  // Rank 1 creates its segment, tells rank 0 through the FIFO and blocks; rank 0 then kills
  // itself with SIGKILL, leaving its own segment behind.
  std::string script = std::string(kCreateSegment) + " || exit 9; if [ $CHORUS_RANK = 0 ]; then " +
                       "read ready < " + fifo + "; kill -9 $$; else echo ready > " + fifo +
                       "; exec sleep 60; fi";
  LaunchResult result = runLauncher(shJob(2, script, {"--kill-grace", "1"}), 20s);
  ASSERT_FALSE(result.timedOut) << result.err;
  EXPECT_EQ(result.exitCode, 128 + SIGKILL) << result.err;
  EXPECT_NE(result.err.find("rank 0"), std::string::npos) << result.err;
  EXPECT_EQ(lastLine(result.out, 0), "created") << result.out;
  EXPECT_EQ(lastLine(result.out, 1), "created") << result.out;
  std::set<std::string> ids = printedValues(result.out, "ID", 2);
  ASSERT_EQ(ids.size(), 1u) << result.out;
  EXPECT_EQ(segmentsOf(*ids.begin()), std::set<std::string>{});
  EXPECT_TRUE(fs::exists(other.path())) << "another job's segment was removed";
}

TEST(ShmCleanup, SegmentsAreRemovedAfterTheLauncherIsSignalled) {
  SKIP_WITHOUT_DEV_SHM();
  constexpr int kRanks = 2;
  LauncherProcess launcher(
      shJob(kRanks, std::string(kCreateSegment) + " && exec sleep 60", {"--kill-grace", "1"}));
  Deadline deadline = Deadline::after(20s);
  bool ready = launcher.waitForStdout(
      [](const std::string& out) {
        return rankLines(out, 0).size() == 2 && rankLines(out, 1).size() == 2;
      },
      deadline);
  ASSERT_TRUE(ready) << "the ranks did not create their segments in time";
  launcher.signal(SIGTERM);
  LaunchResult result = launcher.finish(deadline);
  ASSERT_FALSE(result.timedOut) << result.err;
  EXPECT_EQ(result.exitCode, 128 + SIGTERM) << result.err;
  std::set<std::string> ids = printedValues(result.out, "ID", kRanks);
  ASSERT_EQ(ids.size(), 1u) << result.out;
  EXPECT_EQ(segmentsOf(*ids.begin()), std::set<std::string>{});
}

// Two launchers on 127.0.0.1 play two nodes of one job (as in multi_node_test.cc).
std::pair<LaunchResult, LaunchResult> runTwoNodes(const std::string& script) {
  uint16_t port = [] {
    net::Socket listener = net::listenTcp("127.0.0.1", 0);
    return net::boundPort(listener);
  }();
  auto args = [&](int node) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(node),
                                    "--master",
                                    "127.0.0.1:" + std::to_string(port),
                                    "--nproc-per-node",
                                    "2",
                                    "/bin/sh",
                                    "-c",
                                    script};
  };
  std::vector<std::string> env = {"CHORUS_JOB_TOKEN=shm-cleanup-test-token-0123456789"};
  LauncherProcess node0(args(0), env);
  LauncherProcess node1(args(1), env);
  Deadline deadline = Deadline::after(30s);
  LaunchResult second = node1.finish(deadline);
  return {node0.finish(deadline), second};
}

TEST(ShmCleanup, NodesShareTheJobIdAndEachCleansUp) {
  SKIP_WITHOUT_DEV_SHM();
  auto [node0, node1] = runTwoNodes(kCreateSegment);
  ASSERT_EQ(node0.exitCode, 0) << node0.err;
  ASSERT_EQ(node1.exitCode, 0) << node1.err;
  std::set<std::string> ids = printedValues(node0.out + node1.out, "ID", 4);
  ASSERT_EQ(ids.size(), 1u) << node0.out << node1.out;
  EXPECT_TRUE(std::regex_match(*ids.begin(), kSixteenHex)) << *ids.begin();
  EXPECT_EQ(lastLine(node1.out, 3), "created") << node1.out;
  EXPECT_EQ(segmentsOf(*ids.begin()), std::set<std::string>{});

  // The same token again: still a fresh id (two jobs sharing a token must not share segments).
  auto [again0, again1] = runTwoNodes(kCreateSegment);
  ASSERT_EQ(again0.exitCode, 0) << again0.err;
  std::set<std::string> againIds = printedValues(again0.out + again1.out, "ID", 4);
  ASSERT_EQ(againIds.size(), 1u) << again0.out << again1.out;
  EXPECT_NE(*againIds.begin(), *ids.begin());
}

}  // namespace
}  // namespace chorus::launcher::testing
