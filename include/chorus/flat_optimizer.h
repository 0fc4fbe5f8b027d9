// chorus/flat_optimizer.h — optimizers that update one flat float32 shard in place: the
// arithmetic under ZeRO's sharded optimizer state (chorus/zero_engine.h), also usable alone.
//
// Contract:
//  - An optimizer is made for a shard of `numel` elements and owns its state (momentum, Adam's
//    moments, the step count), zero at first; stateBytes() is its size.
//  - step(params, grads) applies one update to the `numel` parameters from the `numel` gradients.
//    A shard kept in several places is updated in ranges instead: beginStep() once, then
//    update(begin, count, params, grads) for ranges that together cover [0, numel) once, where
//    params and grads point at the range's first element. Either way the update follows
//    torch.optim's update rules for the same hyperparameters (torch 1.13, maximize=False,
//    amsgrad=False):
//      SGD:   g = grad + weight_decay * p; with momentum, buf = g on the first step, else
//             buf = momentum * buf + (1 - dampening) * g, and g = (nesterov ? g + momentum * buf
//             : buf); then p -= lr * g.
//      Adam:  g = grad + weight_decay * p; m = beta1 * m + (1 - beta1) * g;
//             v = beta2 * v + (1 - beta2) * g²;
//             p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
//      AdamW: p *= 1 - lr * weight_decay first, then Adam without weight decay in g.
//    The loops are simple and branch-free so the compiler vectorizes them.
//  - The state is reachable for checkpoints: stateNames() (torch.optim's names: "momentum_buffer";
//    "exp_avg", "exp_avg_sq"), state(name) (numel floats), and setSteps() for the step count.
//  - Invalid hyperparameters (lr < 0, momentum < 0, betas outside [0, 1), eps < 0, nesterov
//    without momentum or with dampening) are InvalidArgumentError, naming the value.
//  - setOptions(sgd, adam) changes the hyperparameters between steps (a learning-rate schedule):
//    SGD takes `sgd`, Adam and AdamW take `adam` (AdamW stays AdamW), and the state is kept. The
//    values are checked as at construction; so is a change of SGD's momentum between zero and
//    non-zero, which would add or drop state (InvalidArgumentError). A refused call changes
//    nothing.
//  - Ownership: the caller owns params and grads; an optimizer reads and writes them only during
//    the call and keeps no pointer to them. state(name) points into the optimizer's own memory,
//    valid while the optimizer lives.
//  - Blocking: pure arithmetic on the calling thread; nothing communicates or waits.
//  - Not thread-safe; one optimizer per shard (different optimizers may run on different threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chorus::parallel {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weightDecay = 0.0;
  bool nesterov = false;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  bool decoupledWeightDecay = false;  // AdamW
};

class FlatOptimizer {
 public:
  virtual ~FlatOptimizer() = default;
  virtual std::string name() const = 0;
  void step(float* params, const float* grads) {
    beginStep();
    update(0, numel_, params, grads);
  }
  void beginStep() { ++steps_; }
  virtual void update(size_t begin, size_t count, float* params, const float* grads) = 0;
  virtual void setOptions(const SgdOptions& sgd, const AdamOptions& adam) = 0;
  virtual size_t stateBytes() const = 0;
  virtual std::vector<std::string> stateNames() const = 0;
  // The named state array (numel floats); InvalidArgumentError for an unknown name.
  virtual float* state(const std::string& name) = 0;
  size_t numel() const { return numel_; }
  int64_t steps() const { return steps_; }
  void setSteps(int64_t steps) { steps_ = steps; }

 protected:
  explicit FlatOptimizer(size_t numel) : numel_(numel) {}
  size_t numel_;
  int64_t steps_ = 0;
};

std::unique_ptr<FlatOptimizer> makeSgd(size_t numel, const SgdOptions& options);
std::unique_ptr<FlatOptimizer> makeAdam(size_t numel, const AdamOptions& options);
// By name: "sgd" (from `sgd`), "adam" or "adamw" (from `adam`, AdamW with decoupled weight decay);
// any other name is InvalidArgumentError.
std::unique_ptr<FlatOptimizer> makeOptimizer(const std::string& kind,
                                             size_t numel,
                                             const SgdOptions& sgd,
                                             AdamOptions adam);

}  // namespace chorus::parallel
