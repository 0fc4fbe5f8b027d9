// chorus/zero_layout.h — ZeroLayout: where every parameter element lives under ZeRO: parameters
// grouped into units (the gradient buckets of stages 1 and 2, the modules of stage 3), each unit
// cut into equal shards, and one rank's shards of all units back to back.
//
// Contract:
//  - Every parameter belongs to exactly one unit; a unit is a non-empty list of parameter indices.
//    Unit u is packed and padded by its own ShardPlan (plan(u)), whose local parameter k is
//    unitParameters(u)[k]. A collective on unit u moves plan(u).paddedNumel() elements, and rank r
//    owns plan(u)'s shard r: plan(u).shardNumel() elements.
//  - This rank's shard is the concatenation of its shards of units 0, 1, ...: unit u's part starts
//    at shardOffset(u), and shardNumel() is the total (parameters plus padding).
//  - ownedPieces() lists, unit by unit in flat order, the parameter runs in this rank's shard
//    (padding excluded); over all ranks they cover every parameter element once.
//  - planUnits() groups parameters the way data-parallel buckets do (chorus/gradient_reducer.h):
//    reverse registration order, a small first unit, then up to the limit each; a unit closes once
//    it holds at least its limit, and no parameter is split.
//  - Pure and deterministic; bad arguments (a parameter in no unit or in two, an empty unit, a
//    rank outside [0, shardCount), zero limits) are InvalidArgumentError. A layout is a plain value
//    that owns its tables: copyable, never blocking, safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chorus/shard_plan.h"
#include "chorus/types.h"

namespace chorus::parallel {

struct OwnedPiece {
  int parameter = 0;
  int64_t parameterOffset = 0;
  int64_t numel = 0;
  int64_t shardOffset = 0;  // within this rank's whole shard

  bool operator==(const OwnedPiece&) const = default;
};

class ZeroLayout {
 public:
  ZeroLayout(std::vector<int64_t> numels,
             std::vector<std::vector<int>> units,
             int shardCount,
             int rank,
             int64_t alignElements);

  int numParameters() const { return static_cast<int>(numels_.size()); }
  int numUnits() const { return static_cast<int>(units_.size()); }
  int rank() const { return rank_; }
  int shardCount() const { return plans_.front().shardCount(); }
  int64_t parameterNumel(int parameter) const { return numels_.at(parameter); }
  // Ψ: the elements of all parameters.
  int64_t totalNumel() const { return total_; }

  const ShardPlan& plan(int unit) const { return plans_.at(unit); }
  const std::vector<int>& unitParameters(int unit) const { return units_.at(unit); }
  int unitOf(int parameter) const { return unitOf_.at(parameter); }
  // Where the parameter starts in its unit's flat (padded) space.
  int64_t offsetInUnit(int parameter) const;
  int64_t shardOffset(int unit) const { return shardOffsets_.at(unit); }
  int64_t shardNumel() const { return shardNumel_; }
  int64_t ownedNumel() const { return ownedNumel_; }
  const std::vector<OwnedPiece>& ownedPieces() const { return owned_; }

 private:
  std::vector<int64_t> numels_;
  std::vector<std::vector<int>> units_;
  std::vector<ShardPlan> plans_;
  std::vector<int> unitOf_;
  std::vector<int> indexInUnit_;
  std::vector<int64_t> shardOffsets_;
  std::vector<OwnedPiece> owned_;
  int rank_;
  int64_t total_ = 0;
  int64_t shardNumel_ = 0;
  int64_t ownedNumel_ = 0;
};

// The limits of planUnits(), in bytes of the parameters' dtype.
struct UnitLimits {
  size_t unitBytes = 0;       // every unit but the first
  size_t firstUnitBytes = 0;  // the first, small so that communication starts early
};

// Parameters of `numels` elements of `dtype` (in registration order) grouped into units.
std::vector<std::vector<int>> planUnits(const std::vector<int64_t>& numels,
                                        DataType dtype,
                                        const UnitLimits& limits);

}  // namespace chorus::parallel
