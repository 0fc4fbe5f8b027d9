// torchrun's spellings on chorusrun's command line (issue 25): users arrive with
//   torchrun --nproc_per_node 4 --nnodes 2 --node_rank 0 --master_addr A --master_port P train.py
// and chorusrun takes those words as aliases of its own, rewriting them before parsing:
//   --nproc_per_node N       -> --nproc-per-node N   (N a number; torchrun's "auto"/"cpu": the
//                                                     cores here; "gpu": refused, name a number)
//   --nnodes N               -> --nnodes N           (an elastic range "1:4" is refused)
//   --node_rank I            -> --node-rank I
//   --master_addr A, --master_port P -> --master A:P (port 29500 without --master_port; with a
//                                                     port alone, the address 127.0.0.1)
//   --rdzv_endpoint H[:P]    -> --master H:P         (port 29400, torchrun's default, if none)
//   --rdzv_backend c10d|static, --rdzv_id X: accepted and ignored (chorus runs its own store)
//   --standalone             -> one node (refused with --nnodes > 1)
// Both "_" and "-" spellings are accepted, with the value after "=" or as the next word. A
// torchrun option chorus does not support (elastic restarts, log redirection, module mode, ...)
// is an error that says so; --help lists chorus's own names only. Rewriting stops at the program
// name, so the program's own arguments are never touched.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace chorus::launcher {

struct TorchrunRewrite {
  std::vector<std::string> args;     // argv with torchrun's spellings replaced by chorusrun's
  std::optional<std::string> error;  // set when a torchrun option cannot be honoured
};

// `args` is argv (args[0] the launcher's name). `takesValue(name)` says whether chorusrun's own
// option `name` ("--timeout") expects a value, so that a value is not taken for the program.
TorchrunRewrite rewriteTorchrunFlags(std::vector<std::string> args,
                                     const std::function<bool(const std::string&)>& takesValue);

}  // namespace chorus::launcher
