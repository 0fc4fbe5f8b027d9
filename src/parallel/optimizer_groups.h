// parallel/optimizer_groups.h — OptimizerGroups: ZeroEngine's parameter groups (torch.optim's
// param_groups): which group each parameter is in, each group's hyperparameters, and the runs of
// this rank's shard that one optimizer update covers.
//
// Contract:
//  - groupOf[i] is parameter i's group, in [0, count); empty means one group. Every group holds a
//    parameter. A size other than the layout's parameter count, a negative group or an empty one
//    is InvalidArgumentError.
//  - runs(u): this rank's shard of unit u as runs {offset in u's shard, numel, group}, in order.
//    One group: one run, the whole shard with its padding (the update is one call per unit, as
//    without groups). Several: the owned pieces (ZeroLayout::ownedPieces), neighbours of one
//    group merged; padding, which nothing reads, is left out.
//  - set(group, sgd, adam) records a group's hyperparameters; select(optimizer, group) hands
//    them to the optimizer (FlatOptimizer::setOptions) before an update of the group's runs.
//    With one group never set, select leaves the optimizer's own options. With several, a group
//    never set is InvalidArgumentError at requireSet() (before a step) and at its select.
//  - A plain value that owns its tables; not thread-safe (the engine's one thread).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "chorus/flat_optimizer.h"
#include "chorus/zero_layout.h"

namespace chorus::parallel {

struct OptimizerRun {
  int64_t offset = 0;  // within the unit's shard
  int64_t numel = 0;
  int group = 0;
};

class OptimizerGroups {
 public:
  OptimizerGroups(const ZeroLayout& layout, const std::vector<int>& groupOf);

  int count() const { return count_; }
  const std::vector<OptimizerRun>& runs(int unit) const { return runs_.at(unit); }
  void set(int group, const SgdOptions& sgd, const AdamOptions& adam);
  void select(FlatOptimizer& optimizer, int group) const;
  void requireSet() const;

 private:
  struct Options {
    SgdOptions sgd;
    AdamOptions adam;
  };
  int count_ = 1;
  std::vector<std::vector<OptimizerRun>> runs_;
  std::vector<std::optional<Options>> options_;
};

}  // namespace chorus::parallel
