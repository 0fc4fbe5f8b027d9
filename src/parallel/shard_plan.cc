#include "chorus/shard_plan.h"

#include <algorithm>
#include <string>

#include "chorus/error.h"

namespace chorus::parallel {

ShardPlan::ShardPlan(std::vector<int64_t> parameterNumels, int shardCount, int64_t alignElements)
    : numels_(std::move(parameterNumels)), shardCount_(shardCount) {
  if (shardCount < 1)
    throw InvalidArgumentError("shard plan: " + std::to_string(shardCount) +
                               " shards; there must be at least one");
  if (alignElements < 1)
    throw InvalidArgumentError("shard plan: alignment of " + std::to_string(alignElements) +
                               " elements; it must be at least 1");
  offsets_.reserve(numels_.size());
  for (size_t p = 0; p < numels_.size(); ++p) {
    if (numels_[p] < 0)
      throw InvalidArgumentError("shard plan: parameter " + std::to_string(p) +
                                 " has a negative size (" + std::to_string(numels_[p]) + ")");
    offsets_.push_back(total_);
    total_ += numels_[p];
  }
  int64_t perShard = (total_ + shardCount - 1) / shardCount;
  shardNumel_ = (perShard + alignElements - 1) / alignElements * alignElements;
}

int64_t ShardPlan::shardBegin(int shard) const {
  if (shard < 0 || shard >= shardCount_)
    throw InvalidArgumentError("shard plan: shard " + std::to_string(shard) + " of " +
                               std::to_string(shardCount_));
  return shard * shardNumel_;
}

std::vector<ShardPiece> ShardPlan::piecesOf(int shard) const {
  const int64_t begin = shardBegin(shard);
  const int64_t end = begin + shardNumel_;
  std::vector<ShardPiece> pieces;
  // The first parameter that ends after `begin`.
  auto first = std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin() - 1;
  for (auto p = std::max<std::ptrdiff_t>(first, 0); p < parameterCount(); ++p) {
    const int64_t from = std::max(begin, offsets_[p]);
    const int64_t to = std::min(end, offsets_[p] + numels_[p]);
    if (offsets_[p] >= end)
      break;
    if (to > from)
      pieces.push_back({static_cast<int>(p), shard, from - offsets_[p], from - begin, to - from});
  }
  return pieces;
}

std::vector<ShardPiece> ShardPlan::rangesOf(int parameter) const {
  const int64_t begin = flatOffset(parameter);
  const int64_t end = begin + numels_[parameter];
  std::vector<ShardPiece> ranges;
  for (int64_t at = begin; at < end;) {
    const int shard = static_cast<int>(at / shardNumel_);
    const int64_t shardEnd = (shard + 1) * shardNumel_;
    const int64_t to = std::min(end, shardEnd);
    ranges.push_back({parameter, shard, at - begin, at - shard * shardNumel_, to - at});
    at = to;
  }
  return ranges;
}

}  // namespace chorus::parallel
