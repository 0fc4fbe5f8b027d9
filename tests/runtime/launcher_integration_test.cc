// chorus programs under the real launcher: a rank killed mid-collective makes chorusrun exit
// non-zero well within 30 s and name the rank; the demo example prints the seed table.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace {

struct Outcome {
  int status = -1;
  std::string output;
  double seconds = 0;
};

// Runs `command` (stdout and stderr together) under coreutils' timeout so a hang fails the test.
Outcome run(const std::string& command) {
  Outcome outcome;
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(("timeout -s KILL 60 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr)
    return outcome;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) outcome.output += buffer.data();
  outcome.status = pclose(pipe);
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

TEST(LauncherIntegrationTest, KilledRankStopsTheJobAndIsNamed) {
  auto outcome = run(std::string(CHORUSRUN_PATH) + " -np 3 " + KILLED_RANK_CHECK_PATH);
  ASSERT_TRUE(WIFEXITED(outcome.status)) << outcome.output;
  EXPECT_NE(WEXITSTATUS(outcome.status), 0) << outcome.output;
  // Also catches a hang: timeout(1) would have stopped it only at 60 s.
  EXPECT_LT(outcome.seconds, 30.0) << outcome.output;
  EXPECT_NE(outcome.output.find("rank 1"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("signal"), std::string::npos) << outcome.output;
}

TEST(LauncherIntegrationTest, DemoPrintsTheSeedTable) {
  auto outcome = run(std::string(CHORUSRUN_PATH) + " -np 4 " + ALLREDUCE_EXAMPLE_PATH);
  ASSERT_TRUE(WIFEXITED(outcome.status) && WEXITSTATUS(outcome.status) == 0) << outcome.output;
  for (int r = 0; r < 4; ++r) {
    char row[64];
    std::snprintf(row, sizeof row, "%4d | %6d | %5d", r, r + 1, 10);
    EXPECT_NE(outcome.output.find(row), std::string::npos) << "missing row " << row << "\n"
                                                           << outcome.output;
  }
  EXPECT_NE(outcome.output.find("N(N+1)/2 = 10: OK"), std::string::npos) << outcome.output;
}

}  // namespace
