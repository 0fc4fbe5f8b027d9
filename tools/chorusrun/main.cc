// chorusrun: starts N ranks of a chorus program on this machine (DESIGN §5).
//
//   chorusrun -np 4 python3 train.py
//
// See options.h for the command line and launcher.h for what happens to the ranks.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

#include "launcher.h"
#include "options.h"

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
    chorus::launcher::Launcher launcher(std::move(*parsed.options));
    return launcher.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorusrun: %s\n", e.what());
    return 1;
  }
}
