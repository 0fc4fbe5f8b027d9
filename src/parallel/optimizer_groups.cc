// Parameter groups of the ZeRO optimizer. See optimizer_groups.h.
#include "parallel/optimizer_groups.h"

#include <algorithm>
#include <string>

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::parallel {
namespace {

int countGroups(const ZeroLayout& layout, const std::vector<int>& groupOf) {
  if (groupOf.empty())
    return 1;
  if (static_cast<int>(groupOf.size()) != layout.numParameters())
    throw InvalidArgumentError(detail::concat("ZeRO: ", groupOf.size(),
                                              " parameter groups given for ",
                                              layout.numParameters(), " parameters"));
  const int count = *std::max_element(groupOf.begin(), groupOf.end()) + 1;
  std::vector<bool> used(static_cast<size_t>(std::max(count, 0)));
  for (int group : groupOf) {
    if (group < 0)
      throw InvalidArgumentError(detail::concat("ZeRO: parameter group ", group, " is negative"));
    used[group] = true;
  }
  for (int group = 0; group < count; ++group) {
    if (!used[group])
      throw InvalidArgumentError(
          detail::concat("ZeRO: parameter group ", group, " of ", count, " holds no parameter"));
  }
  return count;
}

}  // namespace

OptimizerGroups::OptimizerGroups(const ZeroLayout& layout, const std::vector<int>& groupOf)
    : count_(countGroups(layout, groupOf)),
      runs_(static_cast<size_t>(layout.numUnits())),
      options_(static_cast<size_t>(count_)) {
  if (count_ == 1) {
    for (int u = 0; u < layout.numUnits(); ++u)
      runs_[u].push_back({0, layout.plan(u).shardNumel(), 0});
    return;
  }
  for (const OwnedPiece& piece : layout.ownedPieces()) {
    const int unit = layout.unitOf(piece.parameter);
    const int group = groupOf[piece.parameter];
    const int64_t offset = piece.shardOffset - layout.shardOffset(unit);
    std::vector<OptimizerRun>& runs = runs_[unit];
    if (!runs.empty() && runs.back().group == group &&
        runs.back().offset + runs.back().numel == offset)
      runs.back().numel += piece.numel;
    else
      runs.push_back({offset, piece.numel, group});
  }
}

void OptimizerGroups::set(int group, const SgdOptions& sgd, const AdamOptions& adam) {
  CHORUS_CHECK_ARG(group >= 0 && group < count_, "ZeRO: parameter group ", group,
                   " does not exist; there are ", count_);
  options_[group] = Options{sgd, adam};
}

void OptimizerGroups::select(FlatOptimizer& optimizer, int group) const {
  const std::optional<Options>& options = options_.at(group);
  if (options)
    optimizer.setOptions(options->sgd, options->adam);
  else if (count_ > 1)
    requireSet();
}

void OptimizerGroups::requireSet() const {
  if (count_ == 1)
    return;
  for (int group = 0; group < count_; ++group) {
    if (!options_[group])
      throw InvalidArgumentError(detail::concat("ZeRO: parameter group ", group, " of ", count_,
                                                " has no hyperparameters; set every group's "
                                                "(setHyperparameters) before step()"));
  }
}

}  // namespace chorus::parallel
