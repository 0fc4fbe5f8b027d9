// See torchrun_flags.h.
#include "torchrun_flags.h"

#include <algorithm>
#include <thread>

namespace chorus::launcher {
namespace {

// "--master_addr" and "--master-addr" alike: the name with '-' for '_' after the leading "--".
std::string canonical(std::string name) {
  std::replace(name.begin() + std::min<size_t>(2, name.size()), name.end(), '_', '-');
  return name;
}

bool isNumber(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), ::isdigit);
}

// torchrun options chorusrun does not offer, and why.
std::optional<std::string> unsupportedReason(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> kUnsupported = {
      {"--max-restarts", "elastic restarts"},
      {"--monitor-interval", "elastic restarts"},
      {"--rdzv-conf", "elastic rendezvous options"},
      {"--min-nodes", "elastic membership"},
      {"--max-nodes", "elastic membership"},
      {"--role", "elastic roles"},
      {"--log-dir", "per-rank log files (chorusrun prefixes each line with its rank instead)"},
      {"--logs-specs", "per-rank log files"},
      {"--redirects", "output redirection"},
      {"--tee", "output redirection"},
      {"--local-ranks-filter", "output filtering"},
      {"--start-method", "start methods (chorusrun starts every rank as a process)"},
      {"--module", "module mode (run: chorusrun ... python3 -m module)"},
      {"--no-python", "--no-python (chorusrun runs any program: name it)"},
      {"--run-path", "--run-path (name the program instead)"},
      {"--local-addr", "--local-addr (use --bind or CHORUS_IFNAME)"},
      {"--node-rank-is-slurm", "this option"},
  };
  for (const auto& [option, reason] : kUnsupported) {
    if (name == option)
      return reason;
  }
  return std::nullopt;
}

struct Rewriter {
  std::vector<std::string> out;
  std::optional<std::string> masterAddr, masterPort, endpoint;
  bool standalone = false;
  std::optional<std::string> error;

  void fail(std::string message) {
    if (!error)
      error = std::move(message);
  }

  // Handles torchrun's option `name` (canonical) with `value`; false if it is not one.
  bool take(const std::string& name, const std::string& given, const std::string& value) {
    if (name == "--nproc-per-node" && given != "--nproc-per-node") {
      if (value == "auto" || value == "cpu") {
        out.push_back("--nproc-per-node=" +
                      std::to_string(std::max(1u, std::thread::hardware_concurrency())));
      } else if (isNumber(value)) {
        out.push_back("--nproc-per-node=" + value);
      } else {
        fail(given + " " + value + ": chorusrun needs a number of ranks per node here");
      }
    } else if (name == "--nnodes") {
      if (!isNumber(value))
        fail(given + " " + value + ": elastic node ranges are not supported; give one number");
      out.push_back("--nnodes=" + value);
    } else if (name == "--node-rank" && given != "--node-rank") {
      out.push_back("--node-rank=" + value);
    } else if (name == "--master-addr") {
      masterAddr = value;
    } else if (name == "--master-port") {
      masterPort = value;
    } else if (name == "--rdzv-endpoint") {
      endpoint = value;
    } else if (name == "--rdzv-backend") {
      if (value != "c10d" && value != "static")
        fail(given + " " + value +
             ": chorus rendezvouses through its own store (c10d and static "
             "are accepted; etcd is not supported)");
    } else if (name == "--rdzv-id") {
      // chorus's job token and id identify the job; nothing to do.
    } else {
      return false;
    }
    return true;
  }

  // --master from --master_addr/--master_port or --rdzv_endpoint, appended once.
  void finish() {
    if (standalone) {
      const bool multiNode = std::any_of(out.begin(), out.end(), [](const std::string& arg) {
        return arg.rfind("--nnodes=", 0) == 0 && arg != "--nnodes=1";
      });
      if (multiNode)
        fail("--standalone runs one node; it cannot be combined with --nnodes > 1");
    }
    if (endpoint && (masterAddr || masterPort))
      fail("give --rdzv_endpoint or --master_addr/--master_port, not both");
    if (endpoint) {
      out.push_back("--master=" +
                    (endpoint->find(':') == std::string::npos ? *endpoint + ":29400" : *endpoint));
    } else if (masterAddr || masterPort) {
      out.push_back("--master=" + masterAddr.value_or("127.0.0.1") + ":" +
                    masterPort.value_or("29500"));
    }
  }
};

const std::vector<std::string> kTorchrunWithValue = {
    "--nproc-per-node", "--nnodes",        "--node-rank",    "--master-addr",
    "--master-port",    "--rdzv-endpoint", "--rdzv-backend", "--rdzv-id"};

}  // namespace

TorchrunRewrite rewriteTorchrunFlags(std::vector<std::string> args,
                                     const std::function<bool(const std::string&)>& takesValue) {
  Rewriter rewriter;
  size_t i = 1;
  rewriter.out.push_back(args.empty() ? "chorusrun" : args[0]);
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.empty() || arg[0] != '-')
      break;  // the program name (or the "--" before it)
    const size_t equals = arg.find('=');
    const std::string given = arg.substr(0, equals);
    const std::string name = given.rfind("--", 0) == 0 ? canonical(given) : given;
    if (const auto reason = unsupportedReason(name)) {
      rewriter.fail(given + " is a torchrun option chorusrun does not support (" + *reason + ")");
      continue;
    }
    if (name == "--standalone") {
      rewriter.standalone = true;
      continue;
    }
    const bool torchrunValued = std::find(kTorchrunWithValue.begin(), kTorchrunWithValue.end(),
                                          name) != kTorchrunWithValue.end();
    if (torchrunValued && (given != name || name == "--master-addr" || name == "--master-port" ||
                           name.rfind("--rdzv", 0) == 0 || name == "--nnodes")) {
      std::string value;
      if (equals != std::string::npos) {
        value = arg.substr(equals + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        rewriter.fail(given + " needs a value");
        continue;
      }
      if (rewriter.take(name, given, value))
        continue;
    }
    rewriter.out.push_back(arg);  // chorusrun's own option (CLI11 checks it)
    if (equals == std::string::npos && takesValue(given) && i + 1 < args.size())
      rewriter.out.push_back(args[++i]);
  }
  rewriter.finish();
  rewriter.out.insert(rewriter.out.end(), args.begin() + std::min(i, args.size()), args.end());
  return {std::move(rewriter.out), rewriter.error};
}

}  // namespace chorus::launcher
