// rewriteTorchrunFlags (tools/chorusrun/torchrun_flags.h): torchrun's spellings become chorusrun's,
// unsupported ones are refused by name, and the program's arguments are never touched.
#include "torchrun_flags.h"

#include <gtest/gtest.h>

#include <thread>

namespace chorus::launcher {
namespace {

bool chorusTakesValue(const std::string& name) {
  return name == "--timeout" || name == "--np" || name == "-np" || name == "--master" ||
         name == "--nproc-per-node" || name == "--node-rank";
}

std::vector<std::string> rewritten(std::vector<std::string> args) {
  TorchrunRewrite result = rewriteTorchrunFlags(std::move(args), chorusTakesValue);
  EXPECT_FALSE(result.error) << *result.error;
  return result.args;
}

std::string errorOf(std::vector<std::string> args) {
  return rewriteTorchrunFlags(std::move(args), chorusTakesValue).error.value_or("");
}

using Args = std::vector<std::string>;

TEST(TorchrunFlags, TorchrunSpellingsBecomeChorusrunsOwn) {
  EXPECT_EQ(rewritten({"chorusrun", "--nproc_per_node", "4", "--nnodes", "2", "--node_rank", "1",
                       "--master_addr", "10.0.0.1", "--master_port", "29501", "train.py", "-x"}),
            (Args{"chorusrun", "--nproc-per-node=4", "--nnodes=2", "--node-rank=1",
                  "--master=10.0.0.1:29501", "train.py", "-x"}));
  EXPECT_EQ(rewritten({"chorusrun", "--nproc-per-node=2", "--master-addr=h", "prog"}),
            (Args{"chorusrun", "--nproc-per-node=2", "--master=h:29500", "prog"}));
  EXPECT_EQ(rewritten({"chorusrun", "--nproc_per_node=2", "--rdzv_backend", "c10d",
                       "--rdzv_endpoint", "h:1234", "--rdzv_id", "job7", "prog"}),
            (Args{"chorusrun", "--nproc-per-node=2", "--master=h:1234", "prog"}));
  EXPECT_EQ(rewritten({"chorusrun", "--rdzv-endpoint=h", "--nproc_per_node", "1", "prog"}),
            (Args{"chorusrun", "--nproc-per-node=1", "--master=h:29400", "prog"}));
  EXPECT_EQ(rewritten({"chorusrun", "--standalone", "--nproc_per_node", "2", "prog"}),
            (Args{"chorusrun", "--nproc-per-node=2", "prog"}));
  const std::string cores = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(rewritten({"chorusrun", "--nproc_per_node", "auto", "prog"}),
            (Args{"chorusrun", "--nproc-per-node=" + cores, "prog"}));
}

TEST(TorchrunFlags, ChorusrunsOwnOptionsAndTheProgramsArgumentsPassUntouched) {
  EXPECT_EQ(rewritten({"chorusrun", "-np", "2", "--timeout", "5", "prog", "--nproc_per_node", "9",
                       "--max_restarts", "3"}),
            (Args{"chorusrun", "-np", "2", "--timeout", "5", "prog", "--nproc_per_node", "9",
                  "--max_restarts", "3"}));
  EXPECT_EQ(rewritten({"chorusrun", "--nproc-per-node", "3", "--node-rank", "0", "--", "prog"}),
            (Args{"chorusrun", "--nproc-per-node", "3", "--node-rank", "0", "--", "prog"}));
}

TEST(TorchrunFlags, WhatChorusDoesNotSupportIsRefusedByName) {
  EXPECT_EQ(errorOf({"chorusrun", "--max_restarts", "3", "prog"}),
            "--max_restarts is a torchrun option chorusrun does not support (elastic restarts)");
  EXPECT_NE(errorOf({"chorusrun", "--tee=3", "prog"}).find("--tee is a torchrun option"),
            std::string::npos);
  EXPECT_NE(errorOf({"chorusrun", "--nnodes", "1:4", "prog"}).find("elastic node ranges"),
            std::string::npos);
  EXPECT_NE(errorOf({"chorusrun", "--nproc_per_node", "gpu", "prog"}).find("needs a number"),
            std::string::npos);
  EXPECT_NE(errorOf({"chorusrun", "--rdzv_backend", "etcd", "prog"}).find("etcd"),
            std::string::npos);
  EXPECT_NE(errorOf({"chorusrun", "--standalone", "--nnodes", "2", "prog"}).find("--standalone"),
            std::string::npos);
  EXPECT_NE(errorOf({"chorusrun", "--rdzv_endpoint", "h:1", "--master_port", "2", "prog"})
                .find("not both"),
            std::string::npos);
  EXPECT_NE(errorOf({"chorusrun", "--master_addr"}).find("needs a value"), std::string::npos);
}

}  // namespace
}  // namespace chorus::launcher
