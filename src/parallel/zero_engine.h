// parallel/zero_engine.h — ZeRO stages 1, 2 and 3 (arXiv 1910.02054) on one communicator: the
// parameter, gradient and optimizer-state memory of a model, partitioned across its ranks, and the
// collectives that keep it consistent. chorus.torch.ZeroOptimizer connects it to autograd.
//
// Contract:
//  - Every rank of `comm` constructs the engine with the same parameter sizes, units (see
//    ZeroLayout), options and optimizer. Construction communicates nothing. Parameters and
//    gradients have the model's dtype (float32, or bfloat16/float16 for mixed precision, which adds
//    float32 master weights); the optimizer always works on float32.
//  - Parameters. setParameter(i, values) loads parameter i (float32 values, the same on every
//    rank). Stages 1 and 2 keep every parameter whole: parameter(i) is a view into its unit's
//    buffer (parameterStorage(i) keeps it alive) and step() refreshes it. Stage 3 keeps only this
//    rank's shard: gather(u) starts an allgather of unit u, waitGathered(u) finishes it, after
//    which parameter(i) views the gathered unit until release(u) (the memory lives while views hold
//    it).
//  - Gradients, one iteration: markReady(i) or markReady(i, values) as backward produces each
//    gradient, then finalize(). A unit's reduction (avg) is issued, asynchronously, once all its
//    gradients are ready and every unit before it in the issue order has been issued; markReady
//    returns the unit it completed, or -1. The issue order starts as the unit order and, after the
//    first finalize(), follows the order in which rank 0's units completed.
//      Stage 1: gradient(i) views a whole-model gradient buffer that frameworks make the .grad, so
//      backward accumulates into it; units are allreduced in place. finalize() leaves the average.
//      Gradients accumulate across iterations until zeroGradients() (averages of identical values
//      are those values, so accumulating before another reduction stays exact).
//      Stages 2 and 3: markReady(i, values) copies the gradient into its unit's bucket; a bucket is
//      reduce-scattered and its owned part added to this rank's gradient shard, then the bucket is
//      reused, so no rank holds more than a few buckets of gradient at once. Gradients not produced
//      in an iteration count as zero.
//  - step() (after finalize): the optimizer updates this rank's float32 shard (the master weights,
//    or the owned part of the parameters in float32 training), then publishParameters() makes the
//    model's parameters match: stages 1 and 2 allgather every unit, stage 3 writes its shard (the
//    next gather reads it).
//  - Checkpoints: stateNames() ("param" and the optimizer's), exportState(name) and
//    importState(name) move the owned pieces (layout().ownedPieces(), padding excluded) as float32;
//    after importing, call publishParameters(). gatherParameters() returns every parameter whole in
//    float32, in registration order (collective).
//  - memory() reports the bytes this rank holds, by kind, counted from its allocations.
//  - Errors: a bad index, a gradient marked twice in one iteration, step() between markReady and
//    finalize(), or a parameter view of an ungathered unit is InvalidArgumentError; communication
//    errors surface from finalize(), step(), waitGathered() and gatherParameters().
//  - Not thread-safe: one thread at a time (backward's, then the training loop's).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/tensor.h"
#include "parallel/aligned_buffer.h"
#include "parallel/flat_optimizer.h"
#include "parallel/zero_layout.h"

namespace chorus::parallel {

struct ZeroOptions {
  int stage = 1;
  DataType dtype = DataType::kFloat32;  // the model's parameters and gradients
  int64_t alignElements = 32;           // 64-byte aligned shards for 16-bit types
  int bucketsInFlight = 2;              // stages 2 and 3: gradient buckets kept for reuse
};

// Bytes this rank holds. parameters, gradients and optimizerState are the model states of the
// ZeRO paper (optimizerState includes float32 master weights when there are any); buffers are the
// communication buffers alive now (gradient buckets, gathered units, allgather staging), and
// peakBuffers their largest total so far.
struct ZeroMemory {
  size_t parameters = 0;
  size_t gradients = 0;
  size_t optimizerState = 0;
  size_t buffers = 0;
  size_t peakBuffers = 0;
};

using OptimizerFactory = std::function<std::unique_ptr<FlatOptimizer>(size_t numel)>;

class ZeroEngine {
 public:
  ZeroEngine(std::shared_ptr<Communicator> comm,
             std::vector<int64_t> numels,
             std::vector<std::vector<int>> units,
             ZeroOptions options,
             const OptimizerFactory& makeOptimizer);
  ~ZeroEngine();
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  const ZeroLayout& layout() const { return layout_; }
  int stage() const { return options_.stage; }
  DataType dtype() const { return options_.dtype; }
  bool hasMasterWeights() const { return options_.dtype != DataType::kFloat32; }
  const FlatOptimizer& optimizer() const { return *optimizer_; }

  void setParameter(int index, const Tensor& values);
  Tensor parameter(int index) const;
  std::shared_ptr<const void> parameterStorage(int index) const;
  void gather(int unit);
  void waitGathered(int unit);
  void release(int unit);
  bool isGathered(int unit) const;

  Tensor gradient(int index) const;
  std::shared_ptr<const void> gradientStorage(int index) const;
  int markReady(int index);
  int markReady(int index, const Tensor& values);
  bool isReady(int index) const;
  void finalize();
  void zeroGradients();

  void step();
  void publishParameters();
  int64_t steps() const { return optimizer_->steps(); }
  void setSteps(int64_t steps) { optimizer_->setSteps(steps); }
  std::vector<std::string> stateNames() const;
  std::vector<float> exportState(const std::string& name);
  void importState(const std::string& name, const std::vector<float>& values);
  std::vector<float> gatherParameters();

  ZeroMemory memory() const;

 private:
  struct ReduceInFlight {
    int unit = 0;
    std::shared_ptr<AlignedBuffer> bucket;
    std::shared_ptr<Work> work;
  };

  struct BufferAccount;

  size_t elementBytes() const { return dataTypeSize(options_.dtype); }
  std::shared_ptr<AlignedBuffer> allocateState(int64_t numel, DataType dtype, const char* what);
  // A communication buffer: counted in memory().buffers while it lives.
  std::shared_ptr<AlignedBuffer> allocateBuffer(int64_t numel, const char* what);
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
  void retireOldestReduction();
  void adoptRankZeroOrder();
  void updateShard(int unit);
  void dropGathered();

  std::shared_ptr<Communicator> comm_;
  ZeroOptions options_;
  ZeroLayout layout_;
  std::unique_ptr<FlatOptimizer> optimizer_;

  // Stages 1 and 2: every unit whole. Stage 3: this rank's shard, and gathered units.
  std::vector<std::shared_ptr<AlignedBuffer>> unitParameters_;
  std::shared_ptr<AlignedBuffer> parameterShard_;
  std::vector<std::shared_ptr<AlignedBuffer>> gathered_;
  std::vector<std::shared_ptr<Work>> gatherWork_;
  std::shared_ptr<AlignedBuffer> master_;  // float32, mixed precision only

  // Stage 1: whole gradients per unit. Stages 2 and 3: the shard, and buckets.
  std::vector<std::shared_ptr<AlignedBuffer>> unitGradients_;
  std::shared_ptr<AlignedBuffer> gradientShard_;
  std::vector<std::shared_ptr<AlignedBuffer>> bucketOfUnit_;
  std::vector<std::shared_ptr<AlignedBuffer>> freeBuckets_;
  std::deque<ReduceInFlight> reductions_;
  std::vector<std::shared_ptr<Work>> allreduces_;
  int64_t bucketNumel_ = 0;

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
