// chorusrun's command line: `chorusrun -np N [options] program [args...]`.
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
  // --timeout as given (seconds), exported to ranks as CHORUS_TIMEOUT; unset: not exported.
  std::optional<std::string> timeout;
  bool tagOutput = true;
  // How long ranks get between SIGTERM (or a forwarded signal) and SIGKILL.
  std::chrono::milliseconds killGrace{3000};
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
