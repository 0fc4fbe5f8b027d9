// ZeroEngine's checkpoints and reports (see include/chorus/zero_engine.h), and its public
// methods, which forward to ZeroEngine::Impl (zero_engine_impl.h; the work is in zero_engine.cc).
#include <algorithm>

#include "chorus/error.h"
#include "parallel/zero_engine_impl.h"

namespace chorus::parallel {

// ---- checkpoints and reports -------------------------------------------------------------------

std::vector<std::string> ZeroEngine::Impl::stateNames() const {
  std::vector<std::string> names{"param"};
  for (auto& name : optimizer_->stateNames()) names.push_back(name);
  return names;
}

std::vector<float> ZeroEngine::Impl::exportState(const std::string& name) {
  ownedState(name, 0);  // an unknown name fails on every rank, even one that owns nothing
  std::vector<float> values(static_cast<size_t>(layout_.ownedNumel()));
  float* out = values.data();
  for (const OwnedPiece& piece : layout_.ownedPieces()) {
    int unit = layout_.unitOf(piece.parameter);
    const float* from = ownedState(name, unit) + (piece.shardOffset - layout_.shardOffset(unit));
    out = std::copy(from, from + piece.numel, out);
  }
  return values;
}

void ZeroEngine::Impl::importState(const std::string& name, const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != layout_.ownedNumel())
    throw InvalidArgumentError("ZeRO: state \"" + name + "\" has " + std::to_string(values.size()) +
                               " values; this rank owns " + std::to_string(layout_.ownedNumel()));
  ownedState(name, 0);  // an unknown name fails on every rank, even one that owns nothing
  const float* in = values.data();
  for (const OwnedPiece& piece : layout_.ownedPieces()) {
    int unit = layout_.unitOf(piece.parameter);
    float* to = ownedState(name, unit) + (piece.shardOffset - layout_.shardOffset(unit));
    std::copy(in, in + piece.numel, to);
    in += piece.numel;
  }
}

std::vector<float> ZeroEngine::Impl::gatherParameters() {
  checkIdle("gathering parameters");
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (int p = 0; p < layout_.numParameters(); ++p) {
    starts.push_back(total);
    total += layout_.parameterNumel(p);
  }
  std::vector<float> values(static_cast<size_t>(total));
  for (int u = 0; u < layout_.numUnits(); ++u) {
    const ShardPlan& plan = layout_.plan(u);
    std::vector<float> whole(static_cast<size_t>(plan.paddedNumel()));
    comm_
        ->allgather(Tensor(ownedMaster(u), DataType::kFloat32, {plan.shardNumel()}),
                    Tensor(whole.data(), {plan.paddedNumel()}))
        ->wait();
    const auto& members = layout_.unitParameters(u);
    for (size_t k = 0; k < members.size(); ++k) {
      const float* from = whole.data() + plan.flatOffset(static_cast<int>(k));
      std::copy(from, from + plan.parameterNumel(static_cast<int>(k)),
                values.data() + starts[members[k]]);
    }
  }
  return values;
}

ZeroMemory ZeroEngine::Impl::memory() const {
  ZeroMemory memory;
  for (const auto& buffer : unitParameters_) memory.parameters += buffer->bytes();
  if (parameterShard_)
    memory.parameters += parameterShard_->bytes();
  for (const auto& buffer : unitGradients_) memory.gradients += buffer->bytes();
  if (gradientShard_)
    memory.gradients += gradientShard_->bytes();
  memory.optimizerState = optimizer_->stateBytes() + (master_ ? master_->bytes() : 0);
  memory.buffers = account_->current.load();
  memory.peakBuffers = account_->peak.load();
  return memory;
}

// ---- the public methods ------------------------------------------------------------------------

ZeroEngine::ZeroEngine(std::shared_ptr<Communicator> comm,
                       std::vector<int64_t> numels,
                       std::vector<std::vector<int>> units,
                       ZeroOptions options,
                       const OptimizerFactory& makeOptimizer)
    : impl_(std::make_unique<Impl>(
          std::move(comm), std::move(numels), std::move(units), options, makeOptimizer)) {}

ZeroEngine::~ZeroEngine() = default;

const ZeroLayout& ZeroEngine::layout() const { return impl_->layout_; }
int ZeroEngine::stage() const { return impl_->options_.stage; }
DataType ZeroEngine::dtype() const { return impl_->options_.dtype; }
bool ZeroEngine::hasMasterWeights() const { return impl_->hasMasterWeights(); }
const FlatOptimizer& ZeroEngine::optimizer() const { return *impl_->optimizer_; }

void ZeroEngine::setParameter(int index, const Tensor& values) {
  impl_->setParameter(index, values);
}
Tensor ZeroEngine::parameter(int index) const { return impl_->parameter(index); }
std::shared_ptr<const void> ZeroEngine::parameterStorage(int index) const {
  return impl_->parameterStorage(index);
}
void ZeroEngine::gather(int unit) { impl_->gather(unit); }
void ZeroEngine::waitGathered(int unit) { impl_->waitGathered(unit); }
void ZeroEngine::release(int unit) { impl_->release(unit); }
void ZeroEngine::releaseKeepingAddress(int unit) { impl_->releaseKeepingAddress(unit); }
bool ZeroEngine::isGathered(int unit) const { return impl_->isGathered(unit); }

Tensor ZeroEngine::gradient(int index) const { return impl_->gradient(index); }
std::shared_ptr<const void> ZeroEngine::gradientStorage(int index) const {
  return impl_->gradientStorage(index);
}
int ZeroEngine::markReady(int index) { return impl_->markReady(index); }
int ZeroEngine::markReady(int index, const Tensor& values) {
  return impl_->markReady(index, values);
}
Tensor ZeroEngine::ownedGradients(int unit) const { return impl_->ownedGradients(unit); }
std::shared_ptr<const void> ZeroEngine::ownedGradientsStorage(int unit) const {
  ownedGradients(unit);  // the same checks
  return impl_->options_.stage == 1 ? impl_->unitGradients_[unit] : impl_->gradientShard_;
}
bool ZeroEngine::isReady(int index) const { return impl_->isReady(index); }
void ZeroEngine::finalize() { impl_->finalize(); }
void ZeroEngine::zeroGradients() { impl_->zeroGradients(); }

void ZeroEngine::step() { impl_->step(); }
void ZeroEngine::publishParameters() { impl_->publishParameters(); }
int64_t ZeroEngine::steps() const { return impl_->optimizer_->steps(); }
void ZeroEngine::setSteps(int64_t steps) { impl_->optimizer_->setSteps(steps); }
void ZeroEngine::setHyperparameters(const SgdOptions& sgd, const AdamOptions& adam) {
  for (int group = 0; group < impl_->groups_.count(); ++group) setHyperparameters(group, sgd, adam);
}
void ZeroEngine::setHyperparameters(int group, const SgdOptions& sgd, const AdamOptions& adam) {
  if (group < 0 || group >= impl_->groups_.count())  // before anything changes
    throw InvalidArgumentError("ZeRO: parameter group " + std::to_string(group) +
                               " does not exist; there are " +
                               std::to_string(impl_->groups_.count()));
  impl_->checkIdle("setting hyperparameters");
  impl_->optimizer_->setOptions(sgd, adam);  // checks them, and leaves all as it was if it throws
  impl_->groups_.set(group, sgd, adam);
}
int ZeroEngine::parameterGroups() const { return impl_->groups_.count(); }
std::vector<std::string> ZeroEngine::stateNames() const { return impl_->stateNames(); }
std::vector<float> ZeroEngine::exportState(const std::string& name) {
  return impl_->exportState(name);
}
void ZeroEngine::importState(const std::string& name, const std::vector<float>& values) {
  impl_->importState(name, values);
}
std::vector<float> ZeroEngine::gatherParameters() { return impl_->gatherParameters(); }

ZeroMemory ZeroEngine::memory() const { return impl_->memory(); }

}  // namespace chorus::parallel
