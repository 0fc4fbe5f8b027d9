// `chorusrun --launcher mpi` (see mpi_launch.h): builds the mpirun command line and execs it.
#include "mpi_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "chorus/error.h"
#include "host_list.h"

namespace chorus::launcher {
namespace {

// "host1:4,host2:2": the host list syntax both Open MPI's -H and Hydra's -hosts accept.
std::string hostListArgument(const LaunchOptions& options) {
  if (options.hostfile.empty())
    return options.hosts;
  std::string list;
  for (const HostSlots& host : readHostfile(options.hostfile)) {
    list += (list.empty() ? "" : ",") + host.host + ":" + std::to_string(host.slots);
  }
  return list;
}

}  // namespace

std::string mpirunProgram() {
  const char* mpirun = std::getenv("CHORUS_MPIRUN");
  return mpirun != nullptr && *mpirun ? mpirun : "mpirun";
}

MpirunFlavor detectMpirunFlavor(const std::string& mpirun) {
  if (mpirun.find('\'') != std::string::npos)
    return MpirunFlavor::kOpenMpi;  // not quotable for the shell below; Open MPI is the default
  std::string command = "'" + mpirun + "' --version 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr)
    return MpirunFlavor::kOpenMpi;
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr && output.size() < 65536)
    output += buffer;
  ::pclose(pipe);
  return output.find("HYDRA") != std::string::npos ? MpirunFlavor::kHydra : MpirunFlavor::kOpenMpi;
}

std::vector<std::string> mpirunCommand(const LaunchOptions& options, MpirunFlavor flavor) {
  const bool openMpi = flavor == MpirunFlavor::kOpenMpi;
  const std::string hosts = hostListArgument(options);
  std::vector<std::string> command{mpirunProgram()};
  if (openMpi && ::geteuid() == 0)
    command.push_back("--allow-run-as-root");
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (openMpi && options.nprocPerNode > 0 && hosts.empty() && cores > 0 &&
      options.nprocPerNode > cores) {
    command.push_back("--oversubscribe");
  }
  if (options.nprocPerNode > 0)
    command.insert(command.end(), {"-np", std::to_string(options.nprocPerNode)});
  if (!hosts.empty())
    command.insert(command.end(), {openMpi ? "-H" : "-hosts", hosts});
  if (openMpi && options.timeout)
    command.insert(command.end(), {"-x", "CHORUS_TIMEOUT"});
  command.insert(command.end(), options.command.begin(), options.command.end());
  return command;
}

int runWithMpirun(const LaunchOptions& options) {
  std::vector<std::string> command;
  try {
    command = mpirunCommand(options, detectMpirunFlavor(mpirunProgram()));
  } catch (const InvalidArgumentError& error) {
    std::fprintf(stderr, "chorusrun: %s\n", error.what());
    return 2;
  }
  if (options.timeout)
    ::setenv("CHORUS_TIMEOUT", options.timeout->c_str(), 1);
  std::vector<char*> argv;
  for (std::string& arg : command) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp(argv[0], argv.data());
  int error = errno;
  std::fprintf(stderr,
               "chorusrun: could not run '%s' for --launcher mpi: %s; install Open MPI or MPICH "
               "(mpirun on PATH), or set CHORUS_MPIRUN\n",
               argv[0], std::strerror(error));
  return 127;
}

}  // namespace chorus::launcher
