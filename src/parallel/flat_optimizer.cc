// Flat-shard SGD and Adam/AdamW (see include/chorus/flat_optimizer.h). Scalars are computed in
// double, as torch does for its Python-number hyperparameters, then rounded to float once per step.
#include "chorus/flat_optimizer.h"

#include <cmath>
#include <string>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

const char* const kMomentum = "momentum_buffer";
const char* const kExpAvg = "exp_avg";
const char* const kExpAvgSq = "exp_avg_sq";

InvalidArgumentError unknownState(const std::string& optimizer, const std::string& name) {
  return InvalidArgumentError("optimizer: " + optimizer + " has no state named \"" + name + "\"");
}

void require(bool ok, const std::string& what, double value) {
  if (!ok)
    throw InvalidArgumentError("optimizer: invalid " + what + " " + std::to_string(value));
}

void check(const SgdOptions& options) {
  require(options.lr >= 0, "learning rate", options.lr);
  require(options.momentum >= 0, "momentum", options.momentum);
  require(options.weightDecay >= 0, "weight_decay", options.weightDecay);
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
    throw InvalidArgumentError(
        "optimizer: nesterov momentum requires a momentum and zero dampening");
}

void check(const AdamOptions& options) {
  require(options.lr >= 0, "learning rate", options.lr);
  require(options.beta1 >= 0 && options.beta1 < 1, "beta1", options.beta1);
  require(options.beta2 >= 0 && options.beta2 < 1, "beta2", options.beta2);
  require(options.eps >= 0, "eps", options.eps);
  require(options.weightDecay >= 0, "weight_decay", options.weightDecay);
}

class Sgd final : public FlatOptimizer {
 public:
  Sgd(size_t numel, const SgdOptions& options)
      : FlatOptimizer(numel), options_(options), momentum_(options.momentum > 0 ? numel : 0) {
    check(options);
  }

  void setOptions(const SgdOptions& sgd, const AdamOptions& /*adam*/) override {
    check(sgd);
    if ((sgd.momentum > 0) != (options_.momentum > 0))
      throw InvalidArgumentError(
          "optimizer: SGD's momentum cannot change between zero and non-zero (from " +
          std::to_string(options_.momentum) + " to " + std::to_string(sgd.momentum) +
          "): the momentum buffer is state made at construction (a schedule that cycles "
          "momentum, as OneCycleLR and CyclicLR do by default, needs an SGD made with momentum, "
          "or cycle_momentum=False)");
    options_ = sgd;
  }

  std::string name() const override { return "sgd"; }
  size_t stateBytes() const override { return momentum_.size() * sizeof(float); }

  std::vector<std::string> stateNames() const override {
    return momentum_.empty() ? std::vector<std::string>{} : std::vector<std::string>{kMomentum};
  }
  float* state(const std::string& name) override {
    if (name != kMomentum || momentum_.empty())
      throw unknownState(this->name(), name);
    return momentum_.data();
  }

  void update(size_t begin,
              size_t count,
              float* __restrict params,
              const float* __restrict grads) override {
    const auto lr = static_cast<float>(options_.lr);
    const auto decay = static_cast<float>(options_.weightDecay);
    const auto momentum = static_cast<float>(options_.momentum);
    const auto keep = static_cast<float>(1.0 - options_.dampening);
    const bool first = steps_ <= 1;
    if (momentum_.empty()) {
      for (size_t i = 0; i < count; ++i) params[i] -= lr * (grads[i] + decay * params[i]);
      return;
    }
    float* __restrict buffer = momentum_.data() + begin;
    for (size_t i = 0; i < count; ++i) {
      const float g = grads[i] + decay * params[i];
      const float b = first ? g : momentum * buffer[i] + keep * g;
      buffer[i] = b;
      params[i] -= lr * (options_.nesterov ? g + momentum * b : b);
    }
  }

 private:
  SgdOptions options_;
  std::vector<float> momentum_;
};

class Adam final : public FlatOptimizer {
 public:
  Adam(size_t numel, const AdamOptions& options)
      : FlatOptimizer(numel), options_(options), m_(numel), v_(numel) {
    check(options);
  }

  void setOptions(const SgdOptions& /*sgd*/, const AdamOptions& adam) override {
    check(adam);
    const bool decoupled = options_.decoupledWeightDecay;
    options_ = adam;
    options_.decoupledWeightDecay = decoupled;
  }

  std::string name() const override { return options_.decoupledWeightDecay ? "adamw" : "adam"; }
  size_t stateBytes() const override { return (m_.size() + v_.size()) * sizeof(float); }

  std::vector<std::string> stateNames() const override { return {kExpAvg, kExpAvgSq}; }
  float* state(const std::string& name) override {
    if (name == kExpAvg)
      return m_.data();
    if (name == kExpAvgSq)
      return v_.data();
    throw unknownState(this->name(), name);
  }

  void update(size_t begin,
              size_t count,
              float* __restrict params,
              const float* __restrict grads) override {
    const double t = static_cast<double>(steps_);
    const auto beta1 = static_cast<float>(options_.beta1);
    const auto beta2 = static_cast<float>(options_.beta2);
    const auto stepSize = static_cast<float>(options_.lr / (1.0 - std::pow(options_.beta1, t)));
    const auto correction2 = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
    const auto eps = static_cast<float>(options_.eps);
    const bool decoupled = options_.decoupledWeightDecay;
    const auto coupledDecay = static_cast<float>(decoupled ? 0.0 : options_.weightDecay);
    const auto shrink =
        static_cast<float>(decoupled ? 1.0 - options_.lr * options_.weightDecay : 1.0);
    float* __restrict m = m_.data() + begin;
    float* __restrict v = v_.data() + begin;
    for (size_t i = 0; i < count; ++i) {
      const float p = params[i] * shrink;
      const float g = grads[i] + coupledDecay * p;
      m[i] = beta1 * m[i] + (1.0f - beta1) * g;
      v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
      params[i] = p - stepSize * m[i] / (std::sqrt(v[i]) / correction2 + eps);
    }
  }

 private:
  AdamOptions options_;
  std::vector<float> m_;
  std::vector<float> v_;
};

}  // namespace

std::unique_ptr<FlatOptimizer> makeSgd(size_t numel, const SgdOptions& options) {
  return std::make_unique<Sgd>(numel, options);
}

std::unique_ptr<FlatOptimizer> makeAdam(size_t numel, const AdamOptions& options) {
  return std::make_unique<Adam>(numel, options);
}

std::unique_ptr<FlatOptimizer> makeOptimizer(const std::string& kind,
                                             size_t numel,
                                             const SgdOptions& sgd,
                                             AdamOptions adam) {
  if (kind == "sgd")
    return makeSgd(numel, sgd);
  if (kind == "adam" || kind == "adamw") {
    adam.decoupledWeightDecay = kind == "adamw";
    return makeAdam(numel, adam);
  }
  throw InvalidArgumentError("optimizer must be \"sgd\", \"adam\" or \"adamw\", not \"" + kind +
                             "\"");
}

}  // namespace chorus::parallel
