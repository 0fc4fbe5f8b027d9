// Unit tests of `chorusrun --launcher mpi`'s command line (tools/chorusrun/mpi_launch.h): Open MPI
// and Hydra (MPICH) flavors, hostfiles in both formats turned into a host list, bad hostfiles, and
// telling the flavors apart from `--version`. mpi_launcher_test.sh runs the real thing.
#include "mpi_launch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "chorus/error.h"

namespace chorus::launcher {
namespace {

using Args = std::vector<std::string>;

// A file in a fresh temporary directory, removed with the fixture.
class MpiLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/chorus-mpi-launch-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ::unsetenv("CHORUS_MPIRUN");
  }
  void TearDown() override {
    for (const auto& path : files_) ::unlink(path.c_str());
    ::rmdir(dir_.c_str());
    ::unsetenv("CHORUS_MPIRUN");
  }
  std::string write(const std::string& name, const std::string& content, bool executable = false) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    if (executable)
      ::chmod(path.c_str(), 0755);
    files_.push_back(path);
    return path;
  }
  static LaunchOptions withHostfile(const std::string& path) {
    LaunchOptions options;
    options.hostfile = path;
    options.command = {"python3", "train.py"};
    return options;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

bool contains(const Args& args, const std::string& word) {
  return std::find(args.begin(), args.end(), word) != args.end();
}

// The argument after `flag`, or "" when absent.
std::string valueOf(const Args& args, const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  return it == args.end() || it + 1 == args.end() ? "" : *(it + 1);
}

TEST_F(MpiLaunchTest, MpichHostfileBecomesAnOpenMpiHostList) {
  Args args = mpirunCommand(withHostfile(write("hosts", "# two nodes\nnode1:4\nnode2:2\n")),
                            MpirunFlavor::kOpenMpi);
  EXPECT_EQ(args.front(), "mpirun");
  EXPECT_EQ(valueOf(args, "-H"), "node1:4,node2:2");
  EXPECT_FALSE(contains(args, "--hostfile"));
  EXPECT_FALSE(contains(args, "--oversubscribe"));  // hosts place the ranks
  EXPECT_EQ(Args(args.end() - 2, args.end()), (Args{"python3", "train.py"}));
}

TEST_F(MpiLaunchTest, OpenMpiHostfileBecomesAHydraHostList) {
  LaunchOptions options =
      withHostfile(write("hosts", "node1 slots=4 max_slots=8\n\nnode2 slots=2 # small\n"));
  options.nprocPerNode = 6;
  options.timeout = "30";
  Args args = mpirunCommand(options, MpirunFlavor::kHydra);
  EXPECT_EQ(valueOf(args, "-hosts"), "node1:4,node2:2");
  EXPECT_EQ(valueOf(args, "-np"), "6");
  // Open MPI's flags would be errors to Hydra, which passes the environment by itself.
  EXPECT_FALSE(contains(args, "-H"));
  EXPECT_FALSE(contains(args, "--allow-run-as-root"));
  EXPECT_FALSE(contains(args, "-x"));
}

TEST_F(MpiLaunchTest, OpenMpiGetsRootTimeoutAndOversubscribeFlags) {
  LaunchOptions options;
  options.nprocPerNode = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)) + 1;
  options.timeout = "30";
  options.command = {"./a.out"};
  ::setenv("CHORUS_MPIRUN", "/opt/mpi/bin/mpirun", 1);
  Args args = mpirunCommand(options, MpirunFlavor::kOpenMpi);
  EXPECT_EQ(args.front(), "/opt/mpi/bin/mpirun");
  EXPECT_EQ(contains(args, "--allow-run-as-root"), ::geteuid() == 0);
  EXPECT_TRUE(contains(args, "--oversubscribe"));
  EXPECT_EQ(valueOf(args, "-x"), "CHORUS_TIMEOUT");
  EXPECT_EQ(valueOf(args, "-np"), std::to_string(options.nprocPerNode));
}

TEST_F(MpiLaunchTest, BadHostfileIsAnErrorNamingTheLine) {
  try {
    mpirunCommand(withHostfile(write("hosts", "node1:4\nnode2 slots=many\n")),
                  MpirunFlavor::kOpenMpi);
    ADD_FAILURE() << "a bad hostfile was accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("hostfile line 2"), std::string::npos) << error.what();
  }
  EXPECT_THROW(mpirunCommand(withHostfile(dir_ + "/missing"), MpirunFlavor::kOpenMpi),
               InvalidArgumentError);
}

TEST_F(MpiLaunchTest, FlavorComesFromVersionOutput) {
  std::string hydra = write("hydra", "#!/bin/sh\necho 'HYDRA build details:'\n", true);
  std::string openMpi = write("ompi", "#!/bin/sh\necho 'mpirun (Open MPI) 4.1.4'\n", true);
  EXPECT_EQ(detectMpirunFlavor(hydra), MpirunFlavor::kHydra);
  EXPECT_EQ(detectMpirunFlavor(openMpi), MpirunFlavor::kOpenMpi);
  EXPECT_EQ(detectMpirunFlavor(dir_ + "/no-such-mpirun"), MpirunFlavor::kOpenMpi);
}

}  // namespace
}  // namespace chorus::launcher
