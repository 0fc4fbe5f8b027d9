// chorusrun: starts N ranks of a chorus program on this machine (DESIGN §5).
//
//   chorusrun -np 4 python3 train.py
//   chorusrun --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 --nproc-per-node 8 prog
//   chorusrun -H node1:8,node2:8 prog
//   chorusrun --launcher mpi -np 4 prog
//
// See options.h for the command line, launcher.h for what happens to the ranks, node_group.h for
// how the launchers of several nodes cooperate, and remote_start.h for -H / --hostfile, and
// mpi_launch.h for --launcher mpi.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

#include "launcher.h"
#include "mpi_launch.h"
#include "options.h"
#include "remote_start.h"

namespace {

// Ranks' pipes must not land on fds 0-2 if chorusrun was started with one of them closed.
void ensureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1) {
      int null = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null != fd && null >= 0) {
        dup2(null, fd);
        close(null);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensureStandardFds();
  chorus::launcher::ParseResult parsed = chorus::launcher::parseOptions(argc, argv);
  if (!parsed.options) {
    return parsed.exitCode;
  }
  try {
    if (parsed.options->launcher == "mpi") {
      return chorus::launcher::runWithMpirun(*parsed.options);
    }
    if (!parsed.options->hosts.empty() || !parsed.options->hostfile.empty()) {
      return chorus::launcher::runRemoteLaunchers(*parsed.options);
    }
    chorus::launcher::Launcher launcher(std::move(*parsed.options));
    return launcher.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorusrun: %s\n", e.what());
    return 1;
  }
}
