// `chorusrun --launcher mpi`: hands the job to mpirun instead of starting the ranks here.
//
// The command run is `mpirun [--allow-run-as-root] [--oversubscribe] [-np N] [-H hosts]
// [--hostfile FILE] [-x CHORUS_TIMEOUT] program args...`: --allow-run-as-root when chorusrun runs
// as root (Open MPI refuses root otherwise), --oversubscribe when -np exceeds this machine's
// online cores, -x CHORUS_TIMEOUT when --timeout was given. CHORUS_MPIRUN names another mpirun.
// chorusrun replaces itself with mpirun (execvp), so output, signals and the exit status are
// mpirun's own; the ranks find each other through MPI (chorus's MPI connector), not the store.
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace chorus::launcher {

// The argv that runWithMpirun executes (argv[0] is the mpirun to run).
std::vector<std::string> mpirunCommand(const LaunchOptions& options);

// Executes mpirunCommand(options). Returns only when mpirun could not be started: 127 after
// printing why on stderr.
int runWithMpirun(const LaunchOptions& options);

}  // namespace chorus::launcher
