// Command-line parsing for chorusrun (see options.h).
#include "options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>

namespace chorus::launcher {
namespace {

constexpr const char* kFooter = R"(
Everything from the program name on is passed to the program untouched.

Each rank gets CHORUS_RANK, CHORUS_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE,
CHORUS_NODE_RANK, CHORUS_NNODES, CHORUS_STORE, CHORUS_JOB_TOKEN, CHORUS_JOB_ID,
CHORUS_LAUNCHER, and the torchrun-compatible RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Output lines are prefixed "[rank] ".
When a rank fails, the others are stopped and chorusrun exits with its code.

Examples:
  chorusrun -np 4 python3 train.py
  chorusrun -np 4 ./build/bin/allreduce --count 1024)";

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: chorusrun -np N [options] program [args...]\n";
  }
};

// CLI11 cannot declare a multi-letter single-dash option, so the MPI-style "-np" is rewritten to
// "--np" among chorusrun's own arguments (stopping at the program name, which is the first word
// that is neither an option nor an option's value).
std::vector<std::string> rewriteMpiStyle(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--" || arg.empty() || arg[0] != '-') {
      break;
    }
    if (arg == "-np" || arg.rfind("-np=", 0) == 0) {
      arg.insert(0, "-");
    }
    size_t equals = arg.find('=');
    std::string name = arg.substr(0, equals);
    const CLI::Option* option = app.get_option_no_throw(name);
    if (option == nullptr) {
      break;  // Unknown, or a short option with its value attached ("-n4"): CLI11 decides.
    }
    if (equals == std::string::npos && option->get_items_expected_min() > 0) {
      ++i;  // Skip the option's value.
    }
  }
  return args;
}

}  // namespace

ParseResult parseOptions(int argc, const char* const* argv) {
  CLI::App app{"chorusrun: start N ranks of a chorus program on this machine", "chorusrun"};
  app.prefix_command();
  app.footer(kFooter);
  app.formatter(std::make_shared<UsageFormatter>());

  LaunchOptions options;
  double killGraceSeconds = 3.0;
  std::string timeout;
  app.add_option("-n,--np,--nproc-per-node", options.nprocPerNode,
                 "Number of ranks to start on this node (-np N also works)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--nnodes", options.nnodes, "Number of nodes (only 1 for now)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            return value == "1" ? "" : "only --nnodes 1 is supported so far; run one node";
          },
          "1"));
  app.add_option("--timeout", timeout,
                 "Collective timeout in seconds, exported to ranks as CHORUS_TIMEOUT")
      ->check(CLI::PositiveNumber);
  app.add_flag("--tag-output,!--no-tag-output", options.tagOutput,
               "Prefix each output line with \"[rank] \" (default on)");
  app.add_option("--kill-grace", killGraceSeconds,
                 "Seconds between SIGTERM and SIGKILL when stopping ranks (default 3)")
      ->check(CLI::Range(0.0, 3600.0));

  try {
    std::vector<std::string> args = rewriteMpiStyle(app, argc, argv);
    std::vector<const char*> rewritten;
    for (const std::string& arg : args) {
      rewritten.push_back(arg.c_str());
    }
    app.parse(static_cast<int>(rewritten.size()), rewritten.data());
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return {std::nullopt, code == 0 ? 0 : 2};
  }

  options.command = app.remaining(false);
  if (!options.command.empty() && options.command.front() == "--") {
    options.command.erase(options.command.begin());
  }
  auto usageError = [](const std::string& message) {
    std::cerr << "chorusrun: " << message << "\nRun with --help for more information.\n";
    return ParseResult{std::nullopt, 2};
  };
  if (options.command.empty()) {
    return usageError("no program given; usage: chorusrun -np N program [args...]");
  }
  const std::string& first = options.command.front();
  if (first.size() > 1 && first[0] == '-') {
    return usageError("unknown option '" + first + "' (put options before the program name)");
  }
  if (options.nprocPerNode == 0) {
    return usageError("say how many ranks to start, e.g. chorusrun -np 4 " + first);
  }
  if (!timeout.empty()) {
    options.timeout = timeout;
  }
  options.killGrace = std::chrono::milliseconds(std::llround(killGraceSeconds * 1000.0));
  return {std::move(options), 0};
}

}  // namespace chorus::launcher
