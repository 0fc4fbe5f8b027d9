// chorusrun's command line: `chorusrun -np N [options] program [args...]`, or for several nodes
// `--nnodes N --node-rank I --master HOST:PORT --nproc-per-node K`, or `-H host:K,...`; with
// `--launcher mpi`, mpirun starts the ranks instead (-np, -H and --hostfile are passed to it).
//
// Everything from the program name on belongs to the program and is passed to it untouched, so
// `chorusrun -np 2 prog -np 5` gives the program "-np 5". Parsing uses CLI11 as a prefix command;
// the MPI-style single-dash "-np" (which CLI11 cannot declare) is rewritten to "--np" among the
// launcher's own arguments only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace chorus::launcher {

struct LaunchOptions {
  int nprocPerNode = 0;
  int nnodes = 1;
  int nodeRank = 0;
  // --master HOST:PORT: where node 0 serves the store (multi-node); empty for one node.
  std::string master;
  // --bind ADDR: the address this node's listeners bind (store on node 0, the ranks' transports);
  // empty: not given (see Note [Bind address], src/connector/bind_address.h).
  std::string bind;
  // How long nodes other than 0 keep trying to reach the store.
  std::chrono::milliseconds connectTimeout{60000};
  // The job token's file (--token-file, else CHORUS_JOB_TOKEN_FILE); empty: none.
  std::string tokenFile;
  // Read the job token from the first line of stdin (what the -H coordinator passes over ssh).
  bool tokenStdin = false;
  // -H host:slots,... and --hostfile FILE: act as the coordinator that starts one launcher per
  // host over ssh (see remote_start.h).
  std::string hosts;
  std::string hostfile;
  // --timeout as given (seconds), exported to ranks as CHORUS_TIMEOUT; unset: not exported.
  std::optional<std::string> timeout;
  bool tagOutput = true;
  // How long ranks get between SIGTERM (or a forwarded signal) and SIGKILL.
  std::chrono::milliseconds killGrace{3000};
  // --launcher: "chorus" (start the ranks here, the default) or "mpi" (hand the job to mpirun;
  // see mpi_launch.h).
  std::string launcher = "chorus";
  // The program and its arguments (never empty after a successful parse).
  std::vector<std::string> command;
};

// Parses argv. Returns the options, or an exit code when chorusrun should exit at once: 0 after
// --help, 2 after a usage error (the message is already printed to stderr).
struct ParseResult {
  std::optional<LaunchOptions> options;
  int exitCode = 0;
};
ParseResult parseOptions(int argc, const char* const* argv);

}  // namespace chorus::launcher
