// chorus/shard_plan.h — ShardPlan: how a group of parameters is partitioned across ranks for ZeRO
// (arXiv 1910.02054); chorus/zero_layout.h keeps one per unit.
//
// Contract:
//  - The parameters, in registration order, are packed back to back into one flat space of
//    totalNumel() elements (parameter p starts at flatOffset(p)). The flat space is padded at its
//    end to paddedNumel() = shardCount() * shardNumel() and cut into shardCount() equal shards;
//    shard r covers flat elements [r * shardNumel(), (r + 1) * shardNumel()).
//  - shardNumel() is the smallest multiple of `alignElements` that covers totalNumel() in
//    shardCount() shards, so every shard starts aligned and the padding is less than
//    shardCount() * alignElements elements.
//  - piecesOf(r) lists, in flat order, the parts of parameters that fall in shard r; rangesOf(p)
//    lists, in order, the parts of parameter p in each shard it touches. Together the pieces cover
//    every element of every parameter exactly once; the padding belongs to no parameter.
//  - Pure and deterministic: every rank computes the same plan from the same arguments. A plan is
//    a plain value that owns its numbers: copyable, never blocking, safe to read from any thread.
//  - Bad arguments (no shards, a negative size, alignment < 1) are InvalidArgumentError.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus::parallel {

// A run of consecutive elements that belongs to one parameter and lies in one shard.
struct ShardPiece {
  int parameter = 0;
  int shard = 0;
  int64_t parameterOffset = 0;  // first element within the parameter
  int64_t shardOffset = 0;      // first element within the shard
  int64_t numel = 0;

  bool operator==(const ShardPiece&) const = default;
};

class ShardPlan {
 public:
  ShardPlan(std::vector<int64_t> parameterNumels, int shardCount, int64_t alignElements = 16);

  int shardCount() const { return shardCount_; }
  int parameterCount() const { return static_cast<int>(numels_.size()); }
  int64_t parameterNumel(int parameter) const { return numels_.at(parameter); }
  int64_t flatOffset(int parameter) const { return offsets_.at(parameter); }
  int64_t totalNumel() const { return total_; }
  int64_t shardNumel() const { return shardNumel_; }
  int64_t paddedNumel() const { return shardNumel_ * shardCount_; }
  // First flat element of shard r.
  int64_t shardBegin(int shard) const;

  std::vector<ShardPiece> piecesOf(int shard) const;
  std::vector<ShardPiece> rangesOf(int parameter) const;

 private:
  std::vector<int64_t> numels_;
  std::vector<int64_t> offsets_;
  int shardCount_;
  int64_t total_ = 0;
  int64_t shardNumel_ = 0;
};

}  // namespace chorus::parallel
