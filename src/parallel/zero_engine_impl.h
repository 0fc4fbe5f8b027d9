// parallel/zero_engine_impl.h — ZeroEngine::Impl, the engine's state, shared by its two source
// files: zero_engine.cc (the buffers, the gradient reductions and the optimizer step) and
// zero_engine_state.cc (checkpoints, reports, and the public methods, which forward here).
// Internal to src/parallel; the contract is chorus/zero_engine.h's.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "chorus/zero_engine.h"
#include "parallel/aligned_buffer.h"
#include "parallel/buffer_account.h"
#include "parallel/gathered_units.h"
#include "parallel/optimizer_groups.h"

namespace chorus::parallel {

// The engine's state and work; the public methods at the end forward here.
struct ZeroEngine::Impl {
  struct ReduceInFlight {
    int unit = 0;
    std::shared_ptr<AlignedBuffer> bucket;
    std::shared_ptr<Work> work;
  };

  Impl(std::shared_ptr<Communicator> comm,
       std::vector<int64_t> numels,
       std::vector<std::vector<int>> units,
       ZeroOptions options,
       const OptimizerFactory& makeOptimizer);
  ~Impl();

  bool hasMasterWeights() const { return options_.dtype != DataType::kFloat32; }
  // The dtype gradients travel in, and whether that compresses them (ZeroOptions::commDtype).
  DataType wireDtype() const { return options_.commDtype.value_or(options_.dtype); }
  bool compresses() const { return wireDtype() != options_.dtype; }
  // The gradients' reduction: avg, or sum of the already divided values when compressing (kAvg
  // would stage half precision in float32 and move as many bytes as before; a sum of 16-bit
  // values stays 16-bit on the wire where the backend reduces half precision, as shm does).
  ReduceOp reductionOp() const { return compresses() ? ReduceOp::kSum : ReduceOp::kAvg; }

  void setParameter(int index, const Tensor& values);
  Tensor parameter(int index) const;
  std::shared_ptr<const void> parameterStorage(int index) const;
  void gather(int unit);
  void waitGathered(int unit);
  void release(int unit);
  void releaseKeepingAddress(int unit);
  bool isGathered(int unit) const;

  Tensor gradient(int index) const;
  Tensor ownedGradients(int unit) const;
  std::shared_ptr<const void> gradientStorage(int index) const;
  int markReady(int index);
  int markReady(int index, const Tensor& values);
  bool isReady(int index) const;
  void finalize();
  void zeroGradients();

  void step();
  void publishParameters();
  std::vector<std::string> stateNames() const;
  std::vector<float> exportState(const std::string& name);
  void importState(const std::string& name, const std::vector<float>& values);
  std::vector<float> gatherParameters();

  ZeroMemory memory() const;

  size_t elementBytes() const { return dataTypeSize(options_.dtype); }
  std::shared_ptr<AlignedBuffer> allocateState(int64_t numel, DataType dtype, const char* what);
  // A communication buffer: counted in memory().buffers while it lives.
  std::shared_ptr<AlignedBuffer> allocateBuffer(int64_t numel, const char* what);
  std::shared_ptr<AlignedBuffer> allocateBuffer(int64_t numel, DataType dtype, const char* what);
  void checkIndex(int index, const char* what) const;
  void checkUnit(int unit, const char* what) const;
  void checkIdle(const char* what) const;
  std::byte* unitParameters(int unit) const;
  float* ownedMaster(int unit) const;
  float* ownedState(const std::string& name, int unit);
  Tensor shardOf(const AlignedBuffer& buffer, int unit) const;

  void startIteration();
  AlignedBuffer& bucketFor(int unit);
  int completeOne(int index);
  void launchReadyUnits();
  void issueReduction(int unit);
  // Stages 2 and 3, compressing: `bucket`'s unit narrowed into a wire buffer; `bucket` is free.
  std::shared_ptr<AlignedBuffer> compressBucket(int unit, std::shared_ptr<AlignedBuffer> bucket);
  void widenStageOneUnits();
  void retireOldestReduction();
  void adoptRankZeroOrder();
  void updateShard(int unit);
  void updateRun(size_t begin, size_t count, float* params, const std::byte* grads);
  void dropGathered();

  std::shared_ptr<Communicator> comm_;
  ZeroOptions options_;
  ZeroLayout layout_;
  OptimizerGroups groups_;
  std::unique_ptr<FlatOptimizer> optimizer_;

  // Stages 1 and 2: every unit whole. Stage 3: this rank's shard, and gathered units.
  std::vector<std::shared_ptr<AlignedBuffer>> unitParameters_;
  std::shared_ptr<AlignedBuffer> parameterShard_;
  std::unique_ptr<GatheredUnits> gathered_;
  std::shared_ptr<AlignedBuffer> master_;  // float32, mixed precision only

  // Stage 1: whole gradients per unit. Stages 2 and 3: the shard, and buckets.
  std::vector<std::shared_ptr<AlignedBuffer>> unitGradients_;
  std::shared_ptr<AlignedBuffer> gradientShard_;
  std::vector<std::shared_ptr<AlignedBuffer>> bucketOfUnit_;
  std::vector<std::shared_ptr<AlignedBuffer>> freeBuckets_;
  std::deque<ReduceInFlight> reductions_;
  std::vector<std::shared_ptr<Work>> allreduces_;
  int64_t bucketNumel_ = 0;
  // Compression: stage 1's wire copy of each unit (made once); stages 2 and 3's free wire buffers.
  std::vector<std::shared_ptr<AlignedBuffer>> unitWires_;
  std::vector<std::shared_ptr<AlignedBuffer>> freeWires_;

  std::vector<bool> ready_;
  std::vector<int> pendingInUnit_;
  std::vector<int> issueOrder_;
  std::vector<int> completedOrder_;
  int nextToIssue_ = 0;
  int markedThisIteration_ = 0;
  int iterations_ = 0;
  std::shared_ptr<BufferAccount> account_;
};

}  // namespace chorus::parallel
