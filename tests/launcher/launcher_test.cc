// chorusrun end to end: the built launcher runs /bin/sh scripts as ranks, and the tests check
// what the ranks saw (environment, token placement), what came out (prefixed lines), and how the
// job ended (exit codes, messages, signals, no process left behind). Every run has a deadline.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "launcher_process.h"

namespace chorus::launcher::testing {
namespace {

using namespace std::chrono_literals;

// chorusrun [options] -np N /bin/sh -c script
std::vector<std::string> shJob(int ranks,
                               const std::string& script,
                               std::vector<std::string> options = {}) {
  options.insert(options.end(), {"-np", std::to_string(ranks), "/bin/sh", "-c", script});
  return options;
}

// The ranks' "NAME=value" lines, per rank.
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

TEST(Launcher, HelpDescribesUsage) {
  LaunchResult result = runLauncher({"--help"});
  EXPECT_EQ(result.exitCode, 0);
  EXPECT_NE(result.out.find("Usage: chorusrun -np N"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("--kill-grace"), std::string::npos) << result.out;
  for (const char* multiNode : {"--nnodes", "--node-rank", "--master", "--hostfile", "--hosts",
                                "--token-file", "CHORUS_RSH"}) {
    EXPECT_NE(result.out.find(multiNode), std::string::npos) << multiNode;
  }
}

TEST(Launcher, UsageErrorsExitTwo) {
  EXPECT_EQ(runLauncher({"-np", "2"}).exitCode, 2);   // no program
  EXPECT_EQ(runLauncher({"/bin/true"}).exitCode, 2);  // no -np
  EXPECT_EQ(runLauncher({"-np", "0", "/bin/true"}).exitCode, 2);
  LaunchResult unknown = runLauncher({"-np", "1", "--bogus", "/bin/true"});
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("--bogus"), std::string::npos) << unknown.err;
  // Before -np too (mpirun's habit: -x VAR -np N): the unknown option is named, not "-np" misread
  // as "-n p" (audit finding).
  for (const char* bogus : {"-x", "--bogus"}) {
    LaunchResult first = runLauncher({bogus, "-np", "2", "/bin/true"});
    EXPECT_EQ(first.exitCode, 2);
    EXPECT_NE(first.err.find(bogus), std::string::npos) << first.err;
    EXPECT_EQ(first.err.find("Value p"), std::string::npos) << first.err;
  }
  EXPECT_EQ(runLauncher({"-n2", "/bin/true"}).exitCode, 0);  // a short option's attached value
}

TEST(Launcher, TorchrunSpellingsStartTheRanks) {
  LaunchResult result = runLauncher({"--nproc_per_node", "2", "--standalone", "/bin/sh", "-c",
                                     "echo \"rank=$RANK of $WORLD_SIZE\""});
  EXPECT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(rankLines(result.out, rank),
              std::vector<std::string>{"rank=" + std::to_string(rank) + " of 2"});
  }
  LaunchResult refused = runLauncher({"--nproc_per_node", "2", "--max_restarts", "1", "/bin/true"});
  EXPECT_EQ(refused.exitCode, 2);
  EXPECT_NE(refused.err.find("--max_restarts is a torchrun option chorusrun does not support"),
            std::string::npos)
      << refused.err;
}

TEST(Launcher, ProgramArgumentsPassUntouched) {
  LaunchResult result = runLauncher(
      {"-np", "2", "/bin/sh", "-c", "echo \"args:$*\"", "sh", "-np", "5", "--help", "--"});
  EXPECT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(rankLines(result.out, rank), std::vector<std::string>{"args:-np 5 --help --"});
  }
}

TEST(Launcher, EachRankGetsItsEnvironment) {
  constexpr int kRanks = 3;
  // Stale values from an enclosing launch must be replaced, not inherited.
  LaunchResult result = runLauncher(shJob(kRanks, kPrintEnvironment), 20s,
                                    {"CHORUS_RANK=99", "RANK=42", "CHORUS_JOB_TOKEN=stale"});
  ASSERT_EQ(result.exitCode, 0) << result.err;
  std::set<std::string> tokens, jobIds;
  for (int rank = 0; rank < kRanks; ++rank) {
    auto vars = rankVariables(result.out, rank);
    std::string r = std::to_string(rank), n = std::to_string(kRanks);
    EXPECT_EQ(vars["CHORUS_RANK"], r);
    EXPECT_EQ(vars["CHORUS_SIZE"], n);
    EXPECT_EQ(vars["CHORUS_LOCAL_RANK"], r);
    EXPECT_EQ(vars["CHORUS_LOCAL_SIZE"], n);
    EXPECT_EQ(vars["CHORUS_NODE_RANK"], "0");
    EXPECT_EQ(vars["CHORUS_NNODES"], "1");
    EXPECT_EQ(vars["CHORUS_LAUNCHER"], "chorusrun");
    EXPECT_EQ(vars["RANK"], r);
    EXPECT_EQ(vars["WORLD_SIZE"], n);
    EXPECT_EQ(vars["LOCAL_RANK"], r);
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], n);
    EXPECT_EQ(vars["MASTER_ADDR"], "127.0.0.1");
    int port = std::atoi(vars["MASTER_PORT"].c_str());
    EXPECT_GT(port, 0);
    EXPECT_LT(port, 65536);
    // MASTER_PORT is for torch.distributed's own store (env://), not chorus's.
    EXPECT_TRUE(std::regex_match(vars["CHORUS_STORE"], std::regex("127\\.0\\.0\\.1:[0-9]+")))
        << vars["CHORUS_STORE"];
    EXPECT_NE(vars["CHORUS_STORE"], "127.0.0.1:" + vars["MASTER_PORT"]);
    EXPECT_TRUE(std::regex_match(vars["CHORUS_JOB_TOKEN"], std::regex("[0-9a-f]{64}")))
        << vars["CHORUS_JOB_TOKEN"];
    EXPECT_FALSE(vars["CHORUS_JOB_ID"].empty());
    EXPECT_EQ(vars.count("CHORUS_TIMEOUT"), 0u);
    tokens.insert(vars["CHORUS_JOB_TOKEN"]);
    jobIds.insert(vars["CHORUS_JOB_ID"]);
  }
  EXPECT_EQ(tokens.size(), 1u);
  EXPECT_EQ(jobIds.size(), 1u);

  // A second job gets a fresh token and job id.
  LaunchResult again = runLauncher(shJob(1, kPrintEnvironment));
  ASSERT_EQ(again.exitCode, 0) << again.err;
  auto vars = rankVariables(again.out, 0);
  EXPECT_EQ(tokens.count(vars["CHORUS_JOB_TOKEN"]), 0u);
  EXPECT_EQ(jobIds.count(vars["CHORUS_JOB_ID"]), 0u);
}

TEST(Launcher, TimeoutIsExported) {
  LaunchResult result = runLauncher(shJob(2, kPrintEnvironment, {"--timeout", "7.5"}));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(rankVariables(result.out, 0)["CHORUS_TIMEOUT"], "7.5");
  EXPECT_EQ(rankVariables(result.out, 1)["CHORUS_TIMEOUT"], "7.5");
}

TEST(Launcher, TokenIsNeverOnACommandLine) {
  // Each rank shows its own command line and its parent's (the launcher's).
  LaunchResult result = runLauncher(
      shJob(2,
            "echo \"TOKEN=$CHORUS_JOB_TOKEN\"; echo \"SELF=$(tr '\\0' ' ' < /proc/$$/cmdline)\"; "
            "echo \"PARENT=$(tr '\\0' ' ' < /proc/$PPID/cmdline)\""));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    auto vars = rankVariables(result.out, rank);
    ASSERT_EQ(vars["TOKEN"].size(), 64u);
    ASSERT_FALSE(vars["SELF"].empty());
    EXPECT_NE(vars["PARENT"].find("chorusrun"), std::string::npos) << vars["PARENT"];
    EXPECT_EQ(vars["SELF"].find(vars["TOKEN"]), std::string::npos);
    EXPECT_EQ(vars["PARENT"].find(vars["TOKEN"]), std::string::npos);
  }
}

TEST(Launcher, RanksReachTheStoreWithTheToken) {
  LaunchResult result = runLauncher({"-np", "3", LAUNCHER_TESTS_PATH, "--store-rank"});
  EXPECT_EQ(result.exitCode, 0) << result.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(rankLines(result.out, rank), std::vector<std::string>{"store ok"}) << result.err;
  }
}

}  // namespace
}  // namespace chorus::launcher::testing
