// Command-line parsing for chorusrun (see options.h).
#include "options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "torchrun_flags.h"

namespace chorus::launcher {
namespace {

constexpr const char* kFooter = R"(
Everything from the program name on is passed to the program untouched.

Each rank gets CHORUS_RANK, CHORUS_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE,
CHORUS_NODE_RANK, CHORUS_NNODES, CHORUS_STORE, CHORUS_JOB_TOKEN, CHORUS_JOB_ID,
CHORUS_LAUNCHER, CHORUS_BIND_ADDR (see below), and the torchrun-compatible RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Output lines are prefixed "[rank] ".
When a rank fails, the others are stopped and chorusrun exits with its code.
CHORUS_JOB_ID (16 hex digits, fresh for each job, the same on every node)
names the job's shared-memory segments, /dev/shm/chorus-<CHORUS_JOB_ID>-*;
once this node's ranks have all exited, however the job ended, chorusrun
removes any of them that are left (e.g. by a rank killed with SIGKILL).

Multi-node: run one launcher per node with the same --nnodes, --master and
--nproc-per-node; node 0 serves the store on --master (bind address:port).
Global rank = node-rank * nproc-per-node + local rank. Every node needs the
same job token, from CHORUS_JOB_TOKEN or --token-file (mode 0600), never argv;
without one, a multi-node launcher refuses to start. If any rank on any node
fails (or a launcher is signalled), every launcher stops its ranks and exits
non-zero naming the node and rank; losing node 0's store does the same.
-H/--hostfile starts those launchers over ssh (CHORUS_RSH overrides "ssh";
"chorusrun" must be on the remote PATH), passing the token on their stdin.
Hostfile lines: "node1 slots=4" or "node1:4"; '#' comments.

Listening sockets: on one node the store and the ranks' transports bind
127.0.0.1 only. Across nodes, --bind ADDR (an IPv4 address of this host) or
CHORUS_IFNAME=<interface> (e.g. eth0; its IPv4 address) says which address
this node's store (node 0, on --master's port) and ranks' transports bind;
the ranks get it as CHORUS_BIND_ADDR. Without either, node 0's store binds the
--master host and ranks bind the interface that reaches the store. chorus
never binds every interface implicitly: a --master of 0.0.0.0 is refused
unless --bind 0.0.0.0 is given explicitly. An unknown interface, or an
address that is not this host's, is an error listing this host's addresses.
With -H/--hostfile use CHORUS_IFNAME (passed on to every host), not --bind.

--launcher mpi: runs "mpirun -np N [-H hosts] program args" instead
(CHORUS_MPIRUN overrides "mpirun"; Open MPI's or MPICH's, told apart by
--version), adding --allow-run-as-root as root and --oversubscribe when -np
exceeds this machine's cores (Open MPI); the ranks then bootstrap through MPI.
A --hostfile in either format above is passed as the host list. Output and
the exit status are mpirun's own (untagged).

torchrun's spellings work too: --nproc_per_node, --nnodes, --node_rank,
--master_addr/--master_port (-> --master), --rdzv_endpoint, --standalone;
torchrun options chorus does not support (elastic restarts, log
redirection) are refused with a message saying so.

Examples:
  chorusrun -np 4 python3 train.py
  chorusrun -np 4 ./build/bin/allreduce --count 1024
  CHORUS_JOB_TOKEN=$(openssl rand -hex 32) chorusrun --nnodes 2 --node-rank 0 \
      --master 10.0.0.1:29500 --nproc-per-node 8 python3 train.py
  chorusrun -H node1:8,node2:8 --master 10.0.0.1:29500 python3 train.py
  chorusrun --launcher mpi -np 4 python3 train.py)";

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: chorusrun -np N [options] program [args...]\n"
           "       chorusrun --nnodes N --node-rank I --master HOST:PORT --nproc-per-node K "
           "[options] program [args...]\n"
           "       chorusrun -H host1:K,host2:K | --hostfile FILE [options] program [args...]\n";
  }
};

// CLI11 cannot declare a multi-letter single-dash option, so the MPI-style "-np" is rewritten to
// "--np" among chorusrun's own arguments (stopping at the program name, which is the first word
// that is neither an option nor an option's value). An option that is not chorusrun's is refused
// here, naming it: the scan stopped there before, and CLI11 then read a later "-np 2" as "-n p",
// "--np: Value p not in range" (an audit found it: `chorusrun -x -np 2 ...`, mpirun's habit).
std::vector<std::string> rewriteMpiStyle(const CLI::App& app, std::vector<std::string> args) {
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
      if (name.size() > 2 && name[1] != '-' && app.get_option_no_throw(name.substr(0, 2)))
        continue;  // a short option with its value attached ("-n4"): CLI11 reads it
      throw CLI::ExtrasError({arg});
    }
    if (equals == std::string::npos && option->get_items_expected_min() > 0) {
      ++i;  // Skip the option's value.
    }
  }
  return args;
}

// What is wrong with a parsed command line, if anything.
std::optional<std::string> usageProblem(const LaunchOptions& options) {
  if (options.command.empty()) {
    return "no program given; usage: chorusrun -np N program [args...]";
  }
  const std::string& first = options.command.front();
  if (first.size() > 1 && first[0] == '-') {
    return "unknown option '" + first + "' (put options before the program name)";
  }
  if (options.launcher == "mpi") {
    if (options.nnodes != 1 || options.nodeRank != 0 || !options.master.empty()) {
      return "--launcher mpi takes -np, -H and --hostfile (mpirun places the ranks); drop "
             "--nnodes, --node-rank and --master";
    }
    if (options.nprocPerNode == 0 && options.hosts.empty() && options.hostfile.empty()) {
      return "say how many ranks to start, e.g. chorusrun --launcher mpi -np 4 " + first;
    }
    return std::nullopt;
  }
  if (!options.hosts.empty() || !options.hostfile.empty()) {
    if (!options.hosts.empty() && !options.hostfile.empty()) {
      return "give -H or --hostfile, not both";
    }
    if (options.nprocPerNode != 0 || options.nnodes != 1 || options.nodeRank != 0) {
      return "with -H/--hostfile the slots per host set the ranks per node; drop -np, --nnodes "
             "and --node-rank";
    }
  } else if (options.nprocPerNode == 0) {
    return "say how many ranks to start, e.g. chorusrun -np 4 " + first;
  }
  if (!options.bind.empty() && (!options.hosts.empty() || !options.hostfile.empty())) {
    return "--bind names one host's address; with -H/--hostfile set CHORUS_IFNAME=<interface> "
           "instead (it is passed to every host)";
  }
  if (options.nnodes > 1 && options.master.empty()) {
    return "--nnodes " + std::to_string(options.nnodes) +
           " needs --master HOST:PORT (where node 0 serves the store)";
  }
  if (options.nodeRank >= options.nnodes) {
    return "--node-rank " + std::to_string(options.nodeRank) + " is not below --nnodes " +
           std::to_string(options.nnodes);
  }
  return std::nullopt;
}

}  // namespace

ParseResult parseOptions(int argc, const char* const* argv) {
  CLI::App app{"chorusrun: start the ranks of a chorus program, on this machine or several",
               "chorusrun"};
  app.prefix_command();
  app.footer(kFooter);
  app.formatter(std::make_shared<UsageFormatter>());

  LaunchOptions options;
  double killGraceSeconds = 3.0;
  std::string timeout;
  app.add_option("-n,--np,--nproc-per-node", options.nprocPerNode,
                 "Number of ranks to start on this node (-np N also works)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--nnodes", options.nnodes, "Number of nodes, one launcher each (default 1)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--node-rank", options.nodeRank, "This node's index, 0 to nnodes-1")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--master", options.master,
                 "HOST:PORT where node 0 serves the store (multi-node; -H: default "
                 "<first host>:29500)");
  app.add_option("--bind", options.bind,
                 "IPv4 address of this host that its store and ranks' transports listen on "
                 "(default 127.0.0.1 on one node; also CHORUS_IFNAME=<interface>); 0.0.0.0 only "
                 "when given explicitly");
  double connectTimeoutSeconds = 60.0;
  app.add_option("--connect-timeout", connectTimeoutSeconds,
                 "Seconds other nodes keep trying to reach node 0's store (default 60)")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--token-file", options.tokenFile,
                 "File (mode 0600) holding the job token; also CHORUS_JOB_TOKEN_FILE");
  app.add_flag("--token-stdin", options.tokenStdin,
               "Read the job token from the first line of stdin (used over ssh)");
  app.add_option("-H,--hosts", options.hosts,
                 "host1:K,host2:K: start one launcher per host over ssh");
  app.add_option("--hostfile", options.hostfile,
                 "File of hosts (\"node1 slots=K\" or \"node1:K\"), as for -H");
  app.add_option("--timeout", timeout,
                 "Collective timeout in seconds, exported to ranks as CHORUS_TIMEOUT")
      ->check(CLI::PositiveNumber);
  app.add_option("--launcher", options.launcher,
                 "chorus (default: start the ranks here) or mpi (run them with mpirun, passing "
                 "-np, -H and --hostfile through)")
      ->check(CLI::IsMember({"chorus", "mpi"}));
  app.add_flag("--tag-output,!--no-tag-output", options.tagOutput,
               "Prefix each output line with \"[rank] \" (default on)");
  app.add_option("--kill-grace", killGraceSeconds,
                 "Seconds between SIGTERM and SIGKILL when stopping ranks (default 3)")
      ->check(CLI::Range(0.0, 3600.0));

  // torchrun's spellings first (torchrun_flags.h): --nproc_per_node, --master_addr, ...
  TorchrunRewrite torchrun = rewriteTorchrunFlags(
      std::vector<std::string>(argv, argv + argc), [&app](const std::string& name) {
        const CLI::Option* option = app.get_option_no_throw(name == "-np" ? "--np" : name);
        return option != nullptr && option->get_items_expected_min() > 0;
      });
  if (torchrun.error) {
    std::cerr << "chorusrun: " << *torchrun.error << "\nRun with --help for more information.\n";
    return ParseResult{std::nullopt, 2};
  }
  try {
    std::vector<std::string> args = rewriteMpiStyle(app, std::move(torchrun.args));
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
  if (std::optional<std::string> problem = usageProblem(options)) {
    std::cerr << "chorusrun: " << *problem << "\nRun with --help for more information.\n";
    return ParseResult{std::nullopt, 2};
  }
  if (options.tokenFile.empty()) {
    if (const char* file = std::getenv("CHORUS_JOB_TOKEN_FILE"); file && *file) {
      options.tokenFile = file;
    }
  }
  options.connectTimeout = std::chrono::milliseconds(std::llround(connectTimeoutSeconds * 1000.0));
  if (!timeout.empty()) {
    options.timeout = timeout;
  }
  options.killGrace = std::chrono::milliseconds(std::llround(killGraceSeconds * 1000.0));
  return {std::move(options), 0};
}

}  // namespace chorus::launcher
