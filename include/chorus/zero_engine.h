// chorus/zero_engine.h — ZeroEngine: ZeRO stages 1, 2 and 3 (arXiv 1910.02054) on one
// communicator: the parameter, gradient and optimizer-state memory of a model, partitioned across
// its ranks, and the collectives that keep it consistent. chorus.torch.ZeroOptimizer connects it to
// autograd.
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
//    which parameter(i) views the gathered unit until release(u) (the memory lives while views
//    hold it). releaseKeepingAddress(u) instead returns the memory's pages to the system at once
//    and gathers u into the same memory next time: views still held cost nothing and read zeros
//    (stale bytes at the edges, which share a page with other memory) until then. It is for views
//    that nothing reads before u's next gather (chorus.torch releases a module's unit so after its
//    forward, and gathers it again before its backward).
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
//      Compression (ZeroOptions::commDtype bfloat16 or float16, float32 models only): each unit's
//      gradients are divided by the rank count and narrowed to that dtype just before their
//      reduction (a sum), and widened after it, as torch's bf16_compress_hook does, so they move
//      half the bytes where the backend reduces half precision (shm; it accumulates in float32
//      and rounds once). Stage 1's units then hold the widened average.
//  - ownedGradients(u) (after finalize): this rank's shard of unit u's reduced gradients, in the
//    model's dtype, padding included (plan(u).shardNumel() elements); the optimizer reads exactly
//    these, so scaling them (gradient clipping) scales the update's gradient. Stage 1: a view
//    into u's whole gradients (the rest are other ranks' shards); stages 2 and 3: into the
//    gradient shard. ownedGradientsStorage(u) keeps the memory alive.
//  - step() (after finalize): the optimizer updates this rank's float32 shard (the master weights,
//    or the owned part of the parameters in float32 training), then publishParameters() makes the
//    model's parameters match: stages 1 and 2 allgather every unit, stage 3 writes its shard (the
//    next gather reads it).
//  - Parameter groups (torch.optim's param_groups): ZeroOptions::parameterGroups gives each
//    parameter's group (empty: one group), parameterGroups() their count. setHyperparameters(g,
//    sgd, adam) sets group g's hyperparameters, setHyperparameters(sgd, adam) every group's, for
//    the next step() (FlatOptimizer::setOptions: checked, and all groups share the optimizer's
//    state, so SGD's momentum is zero in all or in none). One group starts with the optimizer's
//    own; with several, every group must be set before step(). Not between markReady and
//    finalize(). A learning-rate schedule calls them between steps.
//  - Checkpoints: stateNames() ("param" and the optimizer's), exportState(name) and
//    importState(name) move the owned pieces (layout().ownedPieces(), padding excluded) as float32;
//    after importing, call publishParameters(). gatherParameters() returns every parameter whole in
//    float32, in registration order (collective).
//  - memory() reports the bytes this rank holds, by kind, counted from its allocations.
//  - Errors: a bad index, a gradient marked twice in one iteration, step() between markReady and
//    finalize(), or a parameter view of an ungathered unit is InvalidArgumentError; communication
//    errors surface from finalize(), step(), waitGathered() and gatherParameters().
//  - Ownership: the engine shares `comm` and owns every buffer and its optimizer. parameter(i) and
//    gradient(i) are views into that memory; parameterStorage(i) and gradientStorage(i) keep it
//    alive for as long as they are held, also after the engine is gone. The engine reads the
//    tensors it is given (setParameter, markReady) only during the call.
//  - Blocking: gather() and the reductions that markReady() and finalize() issue run on the
//    communicator's worker thread while the caller goes on. markReady(i, values) may wait for an
//    earlier reduction to free a bucket (stages 2 and 3); waitGathered(), release() of a unit still
//    being gathered, finalize(), step() and publishParameters() (stages 1 and 2: an allgather), and
//    gatherParameters() wait for their collectives, each bounded by the communicator's timeout.
//    The destructor waits for operations still in flight.
//  - Not thread-safe: one thread at a time (backward's, then the training loop's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/flat_optimizer.h"
#include "chorus/tensor.h"
#include "chorus/zero_layout.h"

namespace chorus::parallel {

struct ZeroOptions {
  int stage = 1;
  DataType dtype = DataType::kFloat32;  // the model's parameters and gradients
  int64_t alignElements = 32;           // 64-byte aligned shards for 16-bit types
  int bucketsInFlight = 2;              // stages 2 and 3: gradient buckets kept for reuse
  // The dtype gradients travel in: unset for the model's dtype, or bfloat16/float16 to compress a
  // float32 model's gradients (see "Compression" above).
  std::optional<DataType> commDtype;
  // Each parameter's group (see "Parameter groups"); empty: one group.
  std::vector<int> parameterGroups;
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

  const ZeroLayout& layout() const;
  int stage() const;
  DataType dtype() const;
  bool hasMasterWeights() const;
  const FlatOptimizer& optimizer() const;

  void setParameter(int index, const Tensor& values);
  Tensor parameter(int index) const;
  std::shared_ptr<const void> parameterStorage(int index) const;
  void gather(int unit);
  void waitGathered(int unit);
  void release(int unit);
  void releaseKeepingAddress(int unit);
  bool isGathered(int unit) const;

  Tensor gradient(int index) const;
  std::shared_ptr<const void> gradientStorage(int index) const;
  int markReady(int index);
  int markReady(int index, const Tensor& values);
  Tensor ownedGradients(int unit) const;
  std::shared_ptr<const void> ownedGradientsStorage(int unit) const;
  bool isReady(int index) const;
  void finalize();
  void zeroGradients();

  void step();
  void publishParameters();
  int64_t steps() const;
  void setSteps(int64_t steps);
  void setHyperparameters(const SgdOptions& sgd, const AdamOptions& adam);
  void setHyperparameters(int group, const SgdOptions& sgd, const AdamOptions& adam);
  int parameterGroups() const;
  std::vector<std::string> stateNames() const;
  std::vector<float> exportState(const std::string& name);
  void importState(const std::string& name, const std::vector<float>& values);
  std::vector<float> gatherParameters();

  ZeroMemory memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::parallel
