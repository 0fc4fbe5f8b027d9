// `chorusrun --launcher mpi` (see mpi_launch.h): builds the mpirun command line and execs it.
#include "mpi_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace chorus::launcher {

std::vector<std::string> mpirunCommand(const LaunchOptions& options) {
  const char* mpirun = std::getenv("CHORUS_MPIRUN");
  std::vector<std::string> command{mpirun != nullptr && *mpirun ? mpirun : "mpirun"};
  if (::geteuid() == 0) {
    command.push_back("--allow-run-as-root");
  }
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (options.nprocPerNode > 0 && options.hosts.empty() && options.hostfile.empty() && cores > 0 &&
      options.nprocPerNode > cores) {
    command.push_back("--oversubscribe");
  }
  if (options.nprocPerNode > 0) {
    command.insert(command.end(), {"-np", std::to_string(options.nprocPerNode)});
  }
  if (!options.hosts.empty()) {
    command.insert(command.end(), {"-H", options.hosts});
  }
  if (!options.hostfile.empty()) {
    command.insert(command.end(), {"--hostfile", options.hostfile});
  }
  if (options.timeout) {
    command.insert(command.end(), {"-x", "CHORUS_TIMEOUT"});
  }
  command.insert(command.end(), options.command.begin(), options.command.end());
  return command;
}

int runWithMpirun(const LaunchOptions& options) {
  std::vector<std::string> command = mpirunCommand(options);
  if (options.timeout) {
    ::setenv("CHORUS_TIMEOUT", options.timeout->c_str(), 1);
  }
  std::vector<char*> argv;
  for (std::string& arg : command) {
    argv.push_back(arg.data());
  }
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
