// ZeroLayout and planUnits (see include/chorus/zero_layout.h).
#include "chorus/zero_layout.h"

#include <string>

#include "chorus/error.h"
#include "parallel/bucket_plan.h"

namespace chorus::parallel {
namespace {

std::vector<int64_t> numelsOf(const std::vector<int64_t>& numels, const std::vector<int>& unit) {
  std::vector<int64_t> picked;
  for (int parameter : unit) picked.push_back(numels[parameter]);
  return picked;
}

}  // namespace

ZeroLayout::ZeroLayout(std::vector<int64_t> numels,
                       std::vector<std::vector<int>> units,
                       int shardCount,
                       int rank,
                       int64_t alignElements)
    : numels_(std::move(numels)), units_(std::move(units)), rank_(rank) {
  if (units_.empty())
    throw InvalidArgumentError("ZeRO layout: no parameters");
  if (rank < 0 || rank >= shardCount)
    throw InvalidArgumentError("ZeRO layout: rank " + std::to_string(rank) + " outside [0, " +
                               std::to_string(shardCount) + ")");
  unitOf_.assign(numels_.size(), -1);
  indexInUnit_.assign(numels_.size(), -1);
  for (int u = 0; u < numUnits(); ++u) {
    if (units_[u].empty())
      throw InvalidArgumentError("ZeRO layout: unit " + std::to_string(u) + " is empty");
    for (int k = 0; k < static_cast<int>(units_[u].size()); ++k) {
      int parameter = units_[u][k];
      if (parameter < 0 || parameter >= numParameters() || unitOf_[parameter] != -1)
        throw InvalidArgumentError("ZeRO layout: parameter " + std::to_string(parameter) +
                                   " is out of range or in two units");
      unitOf_[parameter] = u;
      indexInUnit_[parameter] = k;
    }
    plans_.emplace_back(numelsOf(numels_, units_[u]), shardCount, alignElements);
  }
  for (int parameter = 0; parameter < numParameters(); ++parameter) {
    if (unitOf_[parameter] == -1)
      throw InvalidArgumentError("ZeRO layout: parameter " + std::to_string(parameter) +
                                 " is in no unit");
    total_ += numels_[parameter];
  }
  for (int u = 0; u < numUnits(); ++u) {
    shardOffsets_.push_back(shardNumel_);
    for (const ShardPiece& piece : plans_[u].piecesOf(rank_)) {
      owned_.push_back({units_[u][piece.parameter], piece.parameterOffset, piece.numel,
                        shardNumel_ + piece.shardOffset});
      ownedNumel_ += piece.numel;
    }
    shardNumel_ += plans_[u].shardNumel();
  }
}

int64_t ZeroLayout::offsetInUnit(int parameter) const {
  return plans_[unitOf(parameter)].flatOffset(indexInUnit_.at(parameter));
}

std::vector<std::vector<int>> planUnits(const std::vector<int64_t>& numels,
                                        DataType dtype,
                                        const UnitLimits& limits) {
  std::vector<GradientSpec> specs;
  for (int64_t numel : numels) specs.push_back({numel, dtype});
  std::vector<std::vector<int>> units;
  for (const Bucket& bucket : planBuckets(specs, reverseOrder(static_cast<int>(numels.size())),
                                          {limits.unitBytes, limits.firstUnitBytes})) {
    units.emplace_back();
    for (const BucketSlot& slot : bucket.slots) units.back().push_back(slot.gradient);
  }
  return units;
}

}  // namespace chorus::parallel
