// ZeroEngine (see include/chorus/zero_engine.h): the buffers of each stage, the gradient
// reductions issued in a fixed order as units complete, and the sharded optimizer step. The state
// lives in ZeroEngine::Impl (zero_engine_impl.h); zero_engine_state.cc holds the checkpoints, the
// reports and the public methods.
#include "chorus/zero_engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>

#include "chorus/error.h"
#include "chorus/trace.h"
#include "core/check.h"
#include "core/copy_bytes.h"
#include "core/reduce_kernels.h"
#include "parallel/aligned_buffer.h"
#include "parallel/buffer_account.h"
#include "parallel/gathered_units.h"
#include "parallel/gradient_wire.h"
#include "parallel/wait_all.h"
#include "parallel/zero_engine_impl.h"

namespace chorus::parallel {
namespace {

constexpr size_t kConversionChunk = 16384;  // float32 elements widened at a time (64 KiB)

std::shared_ptr<Communicator> requireCommunicator(std::shared_ptr<Communicator> comm) {
  if (!comm)
    throw InvalidArgumentError("ZeRO: no communicator");
  return comm;
}

void storeFloat32(DataType dtype, const float* src, void* dst, size_t count) {
  if (dtype == DataType::kFloat32) {
    if (dst != src)  // else the master is the parameters' own shard (float32, stages 1 and 2)
      std::memcpy(dst, src, count * sizeof(float));
  } else
    kernels::narrowFromFloat32(dtype, src, dst, count);
}

}  // namespace

ZeroEngine::Impl::Impl(std::shared_ptr<Communicator> comm,
                       std::vector<int64_t> numels,
                       std::vector<std::vector<int>> units,
                       ZeroOptions options,
                       const OptimizerFactory& makeOptimizer)
    : comm_(requireCommunicator(std::move(comm))),
      options_(options),
      layout_(
          std::move(numels), std::move(units), comm_->size(), comm_->rank(), options.alignElements),
      groups_(layout_, options.parameterGroups),
      account_(std::make_shared<BufferAccount>()) {
  if (options_.stage < 1 || options_.stage > 3)
    throw InvalidArgumentError("ZeRO: stage must be 1, 2 or 3, not " +
                               std::to_string(options_.stage));
  if (options_.dtype != DataType::kFloat32 && options_.dtype != DataType::kBFloat16 &&
      options_.dtype != DataType::kFloat16)
    throw InvalidArgumentError("ZeRO: parameters must be float32, bfloat16 or float16, not " +
                               std::string(toString(options_.dtype)));
  if (compresses() && (options_.dtype != DataType::kFloat32 ||
                       (wireDtype() != DataType::kBFloat16 && wireDtype() != DataType::kFloat16)))
    throw InvalidArgumentError(detail::concat(
        "ZeRO: gradients of ", toString(options_.dtype), " cannot travel as ",
        toString(wireDtype()), ": compression narrows float32 gradients to bfloat16 or float16"));
  optimizer_ = makeOptimizer(static_cast<size_t>(layout_.shardNumel()));
  const int unitCount = layout_.numUnits();
  const int64_t shard = layout_.shardNumel();
  if (hasMasterWeights())
    master_ = allocateState(shard, DataType::kFloat32, "ZeRO: master weights");
  if (options_.stage <= 2) {
    for (int u = 0; u < unitCount; ++u)
      unitParameters_.push_back(
          allocateState(layout_.plan(u).paddedNumel(), options_.dtype, "ZeRO: parameters"));
  } else {
    parameterShard_ = allocateState(shard, options_.dtype, "ZeRO: parameter shard");
    std::vector<size_t> unitBytes;
    for (int u = 0; u < unitCount; ++u)
      unitBytes.push_back(static_cast<size_t>(layout_.plan(u).paddedNumel()) * elementBytes());
    gathered_ = std::make_unique<GatheredUnits>(std::move(unitBytes), account_);
  }
  if (options_.stage == 1) {
    for (int u = 0; u < unitCount; ++u)
      unitGradients_.push_back(
          allocateState(layout_.plan(u).paddedNumel(), options_.dtype, "ZeRO: gradients"));
    unitWires_.resize(unitCount);
  } else {
    gradientShard_ = allocateState(shard, options_.dtype, "ZeRO: gradient shard");
    bucketOfUnit_.resize(unitCount);
    for (int u = 0; u < unitCount; ++u)
      bucketNumel_ =
          std::max(bucketNumel_, layout_.plan(u).paddedNumel() + layout_.plan(u).shardNumel());
  }
  for (int u = 0; u < unitCount; ++u) issueOrder_.push_back(u);
  startIteration();
}

ZeroEngine::Impl::~Impl() {
  // Operations still in flight use our buffers: let them finish first.
  std::vector<std::shared_ptr<Work>> works = std::move(allreduces_);
  for (auto& reduction : reductions_) works.push_back(reduction.work);
  try {
    waitAll(works);
  } catch (const std::exception&) {  // already reported, or never asked for
  }
}

std::shared_ptr<AlignedBuffer> ZeroEngine::Impl::allocateState(int64_t numel,
                                                               DataType dtype,
                                                               const char* what) {
  return std::make_shared<AlignedBuffer>(static_cast<size_t>(numel) * dataTypeSize(dtype), what);
}

std::shared_ptr<AlignedBuffer> ZeroEngine::Impl::allocateBuffer(int64_t numel, const char* what) {
  return allocateBuffer(numel, options_.dtype, what);
}

std::shared_ptr<AlignedBuffer> ZeroEngine::Impl::allocateBuffer(int64_t numel,
                                                                DataType dtype,
                                                                const char* what) {
  size_t bytes = static_cast<size_t>(numel) * dataTypeSize(dtype);
  auto* buffer = new AlignedBuffer(bytes, what);
  account_->add(bytes);
  return std::shared_ptr<AlignedBuffer>(buffer, [account = account_, bytes](AlignedBuffer* b) {
    account->current -= bytes;
    delete b;
  });
}

void ZeroEngine::Impl::checkIndex(int index, const char* what) const {
  if (index < 0 || index >= layout_.numParameters())
    throw InvalidArgumentError(std::string("ZeRO: ") + what + " of parameter " +
                               std::to_string(index) + ", but there are " +
                               std::to_string(layout_.numParameters()) + " parameters");
}

void ZeroEngine::Impl::checkUnit(int unit, const char* what) const {
  if (unit < 0 || unit >= layout_.numUnits())
    throw InvalidArgumentError(std::string("ZeRO: ") + what + " of unit " + std::to_string(unit) +
                               ", but there are " + std::to_string(layout_.numUnits()) + " units");
  if (options_.stage != 3)
    throw InvalidArgumentError(std::string("ZeRO: ") + what +
                               " partitions parameters, which only stage 3 does");
}

void ZeroEngine::Impl::checkIdle(const char* what) const {
  if (markedThisIteration_ > 0)
    throw InvalidArgumentError(std::string("ZeRO: ") + what +
                               " during backward (gradients were marked ready but not finalized)");
}

std::byte* ZeroEngine::Impl::unitParameters(int unit) const {
  return options_.stage <= 2 ? unitParameters_[unit]->as<std::byte>() : gathered_->data(unit);
}

float* ZeroEngine::Impl::ownedMaster(int unit) const {
  if (master_)
    return master_->as<float>() + layout_.shardOffset(unit);
  if (options_.stage <= 2)
    return unitParameters_[unit]->as<float>() + layout_.plan(unit).shardBegin(layout_.rank());
  return parameterShard_->as<float>() + layout_.shardOffset(unit);
}

float* ZeroEngine::Impl::ownedState(const std::string& name, int unit) {
  if (name == "param")
    return ownedMaster(unit);
  return optimizer_->state(name) + layout_.shardOffset(unit);
}

Tensor ZeroEngine::Impl::shardOf(const AlignedBuffer& buffer, int unit) const {
  return Tensor(buffer.as<std::byte>() + layout_.shardOffset(unit) * elementBytes(), options_.dtype,
                {layout_.plan(unit).shardNumel()});
}

// ---- parameters --------------------------------------------------------------------------------

void ZeroEngine::Impl::setParameter(int index, const Tensor& values) {
  checkIndex(index, "setParameter");
  int64_t numel = layout_.parameterNumel(index);
  if (values.dtype() != DataType::kFloat32 || values.numel() != numel || !values.isContiguous())
    throw InvalidArgumentError("ZeRO: parameter " + std::to_string(index) + " is given as " +
                               values.describe() + "; expected contiguous float32 of " +
                               std::to_string(numel) + " elements");
  const auto* source = static_cast<const float*>(values.data());
  int unit = layout_.unitOf(index);
  if (options_.stage <= 2)
    storeFloat32(options_.dtype, source,
                 unitParameters(unit) + layout_.offsetInUnit(index) * elementBytes(), numel);
  for (const OwnedPiece& piece : layout_.ownedPieces()) {
    if (piece.parameter != index)
      continue;
    const float* from = source + piece.parameterOffset;
    if (master_)
      std::memcpy(master_->as<float>() + piece.shardOffset, from, piece.numel * sizeof(float));
    if (options_.stage == 3)
      storeFloat32(options_.dtype, from,
                   parameterShard_->as<std::byte>() + piece.shardOffset * elementBytes(),
                   piece.numel);
  }
}

Tensor ZeroEngine::Impl::parameter(int index) const {
  checkIndex(index, "view");
  int unit = layout_.unitOf(index);
  if (options_.stage == 3 && !isGathered(unit))
    throw InvalidArgumentError("ZeRO: parameter " + std::to_string(index) + " (unit " +
                               std::to_string(unit) +
                               ") is not gathered; stage 3 keeps only "
                               "shards between a module's uses");
  return Tensor(unitParameters(unit) + layout_.offsetInUnit(index) * elementBytes(), options_.dtype,
                {layout_.parameterNumel(index)});
}

std::shared_ptr<const void> ZeroEngine::Impl::parameterStorage(int index) const {
  parameter(index);  // the same checks
  int unit = layout_.unitOf(index);
  if (options_.stage <= 2)
    return unitParameters_[unit];
  return gathered_->storage(unit);
}

void ZeroEngine::Impl::gather(int unit) {
  checkUnit(unit, "gather");
  gathered_->gather(unit, [&](void* buffer) {
    Tensor whole(buffer, options_.dtype, {layout_.plan(unit).paddedNumel()});
    trace::Span mark("zero gather launched", unit);  // Note [Timeline]
    return comm_->allgather(shardOf(*parameterShard_, unit), whole);
  });
}

void ZeroEngine::Impl::waitGathered(int unit) {
  gather(unit);
  gathered_->wait(unit);
}

void ZeroEngine::Impl::release(int unit) {
  checkUnit(unit, "release");
  gathered_->release(unit);
}

void ZeroEngine::Impl::releaseKeepingAddress(int unit) {
  checkUnit(unit, "release");
  gathered_->releaseKeepingAddress(unit);
}

bool ZeroEngine::Impl::isGathered(int unit) const {
  return options_.stage == 3 && gathered_->isGathered(unit);
}

void ZeroEngine::Impl::dropGathered() {
  for (int u = 0; u < layout_.numUnits(); ++u) release(u);
}

// ---- gradients ---------------------------------------------------------------------------------

Tensor ZeroEngine::Impl::gradient(int index) const {
  checkIndex(index, "gradient view");
  if (options_.stage != 1)
    throw InvalidArgumentError(
        "ZeRO: whole gradients exist only in stage 1; stages 2 and 3 keep a shard");
  int unit = layout_.unitOf(index);
  return Tensor(
      unitGradients_[unit]->as<std::byte>() + layout_.offsetInUnit(index) * elementBytes(),
      options_.dtype, {layout_.parameterNumel(index)});
}

std::shared_ptr<const void> ZeroEngine::Impl::gradientStorage(int index) const {
  gradient(index);  // the same checks
  return unitGradients_[layout_.unitOf(index)];
}

Tensor ZeroEngine::Impl::ownedGradients(int unit) const {
  if (unit < 0 || unit >= layout_.numUnits())
    throw InvalidArgumentError(detail::concat("ZeRO: owned gradients of unit ", unit,
                                              ", but there are ", layout_.numUnits(), " units"));
  if (options_.stage != 1)
    return shardOf(*gradientShard_, unit);
  const ShardPlan& plan = layout_.plan(unit);
  return Tensor(
      unitGradients_[unit]->as<std::byte>() + plan.shardBegin(layout_.rank()) * elementBytes(),
      options_.dtype, {plan.shardNumel()});
}

bool ZeroEngine::Impl::isReady(int index) const {
  checkIndex(index, "readiness");
  return ready_[index];
}

int ZeroEngine::Impl::markReady(int index) {
  gradient(index);  // stage 1 only: the gradient is already in its view
  return completeOne(index);
}

int ZeroEngine::Impl::markReady(int index, const Tensor& values) {
  checkIndex(index, "markReady");
  int64_t numel = layout_.parameterNumel(index);
  if (values.dtype() != options_.dtype || values.numel() != numel || !values.isContiguous())
    throw InvalidArgumentError("ZeRO: the gradient of parameter " + std::to_string(index) + " is " +
                               values.describe() + "; expected contiguous " +
                               std::string(toString(options_.dtype)) + " of " +
                               std::to_string(numel) + " elements");
  if (ready_[index])
    return completeOne(index);  // raises
  int unit = layout_.unitOf(index);
  std::byte* destination =
      options_.stage == 1 ? unitGradients_[unit]->as<std::byte>() : bucketFor(unit).as<std::byte>();
  destination += layout_.offsetInUnit(index) * elementBytes();
  if (values.data() != destination && numel > 0)
    copyBytes(destination, values.data(), static_cast<size_t>(numel) * elementBytes());
  return completeOne(index);
}

int ZeroEngine::Impl::completeOne(int index) {
  if (ready_[index])
    throw InvalidArgumentError(
        "ZeRO: the gradient of parameter " + std::to_string(index) +
        " was produced twice in one backward pass (call finalize() between passes; from torch, "
        "a parameter used both inside and outside a torch.utils.checkpoint region with "
        "use_reentrant=True gets two gradients in one backward: use use_reentrant=False)");
  ready_[index] = true;
  ++markedThisIteration_;
  int unit = layout_.unitOf(index);
  if (--pendingInUnit_[unit] != 0)
    return -1;
  completedOrder_.push_back(unit);
  launchReadyUnits();
  return unit;
}

void ZeroEngine::Impl::startIteration() {
  ready_.assign(layout_.numParameters(), false);
  pendingInUnit_.clear();
  for (int u = 0; u < layout_.numUnits(); ++u)
    pendingInUnit_.push_back(static_cast<int>(layout_.unitParameters(u).size()));
  completedOrder_.clear();
  nextToIssue_ = 0;
  markedThisIteration_ = 0;
}

AlignedBuffer& ZeroEngine::Impl::bucketFor(int unit) {
  if (bucketOfUnit_[unit])
    return *bucketOfUnit_[unit];
  while (!reductions_.empty() && reductions_.front().work->isCompleted()) retireOldestReduction();
  auto filling = std::count_if(bucketOfUnit_.begin(), bucketOfUnit_.end(),
                               [](const auto& bucket) { return bucket != nullptr; });
  if (freeBuckets_.empty() && !reductions_.empty() &&
      filling + static_cast<int64_t>(reductions_.size()) >= options_.bucketsInFlight)
    retireOldestReduction();
  std::shared_ptr<AlignedBuffer> bucket;
  if (freeBuckets_.empty()) {
    bucket = allocateBuffer(bucketNumel_, "ZeRO: a gradient bucket");
  } else {
    bucket = std::move(freeBuckets_.back());
    freeBuckets_.pop_back();
    std::memset(bucket->data(), 0, layout_.plan(unit).paddedNumel() * elementBytes());
  }
  bucketOfUnit_[unit] = bucket;
  return *bucket;
}

void ZeroEngine::Impl::launchReadyUnits() {
  while (nextToIssue_ < layout_.numUnits() && pendingInUnit_[issueOrder_[nextToIssue_]] == 0)
    issueReduction(issueOrder_[nextToIssue_++]);
}

void ZeroEngine::Impl::issueReduction(int unit) {
  const ShardPlan& plan = layout_.plan(unit);
  trace::Span mark("zero reduction launched", unit);  // Note [Timeline]
  if (options_.stage == 1) {
    void* gradients = unitGradients_[unit]->data();
    if (compresses()) {
      if (!unitWires_[unit])
        unitWires_[unit] = allocateBuffer(plan.paddedNumel(), wireDtype(), "ZeRO: a wire unit");
      narrowDivided(wireDtype(), static_cast<const float*>(gradients), unitWires_[unit]->data(),
                    static_cast<size_t>(plan.paddedNumel()), comm_->size());
      gradients = unitWires_[unit]->data();
    }
    Tensor whole(gradients, wireDtype(), {plan.paddedNumel()});
    allreduces_.push_back(comm_->allreduce(whole, reductionOp()));
    return;
  }
  std::shared_ptr<AlignedBuffer> bucket = std::move(bucketOfUnit_[unit]);
  if (compresses())
    bucket = compressBucket(unit, std::move(bucket));
  Tensor whole(bucket->data(), wireDtype(), {plan.paddedNumel()});
  Tensor mine(bucket->as<std::byte>() + plan.paddedNumel() * dataTypeSize(wireDtype()), wireDtype(),
              {plan.shardNumel()});
  reductions_.push_back({unit, bucket, comm_->reduceScatter(whole, mine, reductionOp())});
}

std::shared_ptr<AlignedBuffer> ZeroEngine::Impl::compressBucket(
    int unit, std::shared_ptr<AlignedBuffer> bucket) {
  std::shared_ptr<AlignedBuffer> wire;
  if (freeWires_.empty() && static_cast<int>(reductions_.size()) >= options_.bucketsInFlight)
    retireOldestReduction();  // frees a wire bucket: no more than bucketsInFlight in flight
  if (freeWires_.empty()) {
    wire = allocateBuffer(bucketNumel_, wireDtype(), "ZeRO: a wire bucket");
  } else {
    wire = std::move(freeWires_.back());
    freeWires_.pop_back();
  }
  narrowDivided(wireDtype(), bucket->as<float>(), wire->data(),
                static_cast<size_t>(layout_.plan(unit).paddedNumel()), comm_->size());
  if (static_cast<int>(freeBuckets_.size()) < options_.bucketsInFlight)
    freeBuckets_.push_back(std::move(bucket));
  return wire;
}

// Stage 1, compressing: each unit's average, back from its wire copy.
void ZeroEngine::Impl::widenStageOneUnits() {
  for (int u = 0; u < layout_.numUnits(); ++u) {
    if (unitWires_[u])
      kernels::widenToFloat32(wireDtype(), unitWires_[u]->data(), unitGradients_[u]->as<float>(),
                              static_cast<size_t>(layout_.plan(u).paddedNumel()));
  }
}

void ZeroEngine::Impl::retireOldestReduction() {
  ReduceInFlight oldest = std::move(reductions_.front());
  reductions_.pop_front();
  oldest.work->wait();
  const ShardPlan& plan = layout_.plan(oldest.unit);
  const std::byte* reduced =
      oldest.bucket->as<std::byte>() + plan.paddedNumel() * dataTypeSize(wireDtype());
  void* shard = shardOf(*gradientShard_, oldest.unit).data();
  const auto count = static_cast<size_t>(plan.shardNumel());
  if (compresses())
    addWidened(wireDtype(), reduced, static_cast<float*>(shard), count);
  else
    kernels::reduceInto(ReduceOp::kSum, options_.dtype, shard, reduced, count);
  auto& freeList = compresses() ? freeWires_ : freeBuckets_;
  if (static_cast<int>(freeList.size()) < options_.bucketsInFlight)
    freeList.push_back(std::move(oldest.bucket));
}

void ZeroEngine::Impl::finalize() {
  for (int index = 0; index < layout_.numParameters(); ++index) {
    if (ready_[index])
      continue;
    int unit = layout_.unitOf(index);
    if (options_.stage >= 2)
      bucketFor(unit);  // zeroed: an absent gradient contributes nothing
    if (--pendingInUnit_[unit] == 0)
      completedOrder_.push_back(unit);
  }
  launchReadyUnits();
  std::exception_ptr failure;
  try {
    waitAll(allreduces_);
    if (compresses() && options_.stage == 1)
      widenStageOneUnits();
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  while (!reductions_.empty()) {
    try {
      retireOldestReduction();
    } catch (const std::exception&) {
      if (!failure)
        failure = std::current_exception();
    }
  }
  if (failure)
    std::rethrow_exception(failure);
  if (++iterations_ == 1)
    adoptRankZeroOrder();
  startIteration();
}

void ZeroEngine::Impl::adoptRankZeroOrder() {
  std::vector<int32_t> order(completedOrder_.begin(), completedOrder_.end());
  comm_->broadcast(Tensor(order.data(), {static_cast<int64_t>(order.size())}), 0)->wait();
  issueOrder_.assign(order.begin(), order.end());
}

void ZeroEngine::Impl::zeroGradients() {
  checkIdle("zero_grad");
  if (options_.stage == 1) {
    for (auto& buffer : unitGradients_) std::memset(buffer->data(), 0, buffer->bytes());
  } else {
    std::memset(gradientShard_->data(), 0, gradientShard_->bytes());
  }
}

// ---- the optimizer step ------------------------------------------------------------------------

void ZeroEngine::Impl::step() {
  checkIdle("step");
  trace::Span mark("zero step");  // Note [Timeline]
  // Stage 3: a gather still running (a prefetch that no forward used) reads the shard that the
  // update writes; it ends first, and its unit, stale after the update, goes.
  if (options_.stage == 3)
    dropGathered();
  groups_.requireSet();
  optimizer_->beginStep();
  for (int u = 0; u < layout_.numUnits(); ++u) updateShard(u);
  publishParameters();
}

void ZeroEngine::Impl::updateShard(int unit) {
  const auto begin = static_cast<size_t>(layout_.shardOffset(unit));
  const auto* grads = static_cast<const std::byte*>(ownedGradients(unit).data());
  float* params = ownedMaster(unit);
  for (const OptimizerRun& run : groups_.runs(unit)) {  // one run a unit, unless groups differ
    groups_.select(*optimizer_, run.group);
    const auto offset = static_cast<size_t>(run.offset);
    updateRun(begin + offset, static_cast<size_t>(run.numel), params + offset,
              grads + offset * elementBytes());
  }
}

// The optimizer's update of `count` elements from `begin` of the shard (widening the gradients of
// a half-precision model in chunks).
void ZeroEngine::Impl::updateRun(size_t begin,
                                 size_t count,
                                 float* params,
                                 const std::byte* grads) {
  if (options_.dtype == DataType::kFloat32) {
    optimizer_->update(begin, count, params, reinterpret_cast<const float*>(grads));
    return;
  }
  std::vector<float> widened(std::min(count, kConversionChunk));
  for (size_t done = 0; done < count; done += kConversionChunk) {
    size_t n = std::min(kConversionChunk, count - done);
    kernels::widenToFloat32(options_.dtype, grads + done * elementBytes(), widened.data(), n);
    optimizer_->update(begin + done, n, params + done, widened.data());
  }
}

void ZeroEngine::Impl::publishParameters() {
  checkIdle("publishing parameters");
  if (options_.stage == 3) {
    dropGathered();  // stale now; the next use gathers the new values
    if (master_)
      kernels::narrowFromFloat32(options_.dtype, master_->as<float>(), parameterShard_->data(),
                                 static_cast<size_t>(layout_.shardNumel()));
    return;
  }
  // In place: this rank's shard of each unit's parameters (its float32 master there already, else
  // stored there now) is the allgather's input.
  std::vector<std::shared_ptr<Work>> works;
  for (int u = 0; u < layout_.numUnits(); ++u) {
    const ShardPlan& plan = layout_.plan(u);
    std::byte* mine =
        unitParameters_[u]->as<std::byte>() + plan.shardBegin(layout_.rank()) * elementBytes();
    storeFloat32(options_.dtype, ownedMaster(u), mine, static_cast<size_t>(plan.shardNumel()));
    Tensor whole(unitParameters_[u]->data(), options_.dtype, {plan.paddedNumel()});
    works.push_back(comm_->allgather(Tensor(mine, options_.dtype, {plan.shardNumel()}), whole));
  }
  waitAll(works);
}

}  // namespace chorus::parallel
