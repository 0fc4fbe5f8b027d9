// `chorusrun --launcher mpi`: hands the job to mpirun instead of starting the ranks here.
//
// For Open MPI's mpirun the command run is `mpirun [--allow-run-as-root] [--oversubscribe]
// [-np N] [-H hosts] [-x CHORUS_TIMEOUT] program args...`: --allow-run-as-root when chorusrun runs
// as root (Open MPI refuses root otherwise), --oversubscribe when -np exceeds this machine's online
// cores, -x CHORUS_TIMEOUT when --timeout was given. For MPICH's (Hydra) mpiexec it is
// `mpiexec [-np N] [-hosts hosts] program args...` (Hydra passes the whole environment and
// oversubscribes by itself). Which one it is comes from `mpirun --version`. CHORUS_MPIRUN names
// another mpirun.
//
// A --hostfile is read by chorusrun's parser, which takes both formats ("node1 slots=4", Open
// MPI's, and "node1:4", MPICH's; see host_list.h), and handed to mpirun as a host list, so either
// format works with either MPI.
//
// chorusrun replaces itself with mpirun (execvp), so output, signals and the exit status are
// mpirun's own; the ranks find each other through MPI (chorus's MPI connector), not the store.
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace chorus::launcher {

enum class MpirunFlavor { kOpenMpi, kHydra };

// What `mpirun --version` says it is: Hydra when its output mentions HYDRA (MPICH, Intel MPI),
// else Open MPI (also when it cannot be run; execvp reports that later).
MpirunFlavor detectMpirunFlavor(const std::string& mpirun);

// The mpirun to run: CHORUS_MPIRUN, else "mpirun".
std::string mpirunProgram();

// The argv that runWithMpirun executes (argv[0] is the mpirun to run). Reads options.hostfile;
// a malformed or unreadable one is InvalidArgumentError naming the line.
std::vector<std::string> mpirunCommand(const LaunchOptions& options, MpirunFlavor flavor);

// Executes mpirunCommand(options, detectMpirunFlavor(mpirunProgram())). Returns only when mpirun
// could not be started (127) or the hostfile is bad (2), after printing why on stderr.
int runWithMpirun(const LaunchOptions& options);

}  // namespace chorus::launcher
