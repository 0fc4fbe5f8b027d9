// ZeroEngine (see include/chorus/zero_engine.h): the buffers of each stage, the gradient
// reductions issued in a fixed order as units complete, and the sharded optimizer step. The state
// lives in ZeroEngine::Impl, which the public methods at the end forward to.
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
  void dropGathered();

  std::shared_ptr<Communicator> comm_;
  ZeroOptions options_;
  ZeroLayout layout_;
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

ZeroEngine::Impl::Impl(std::shared_ptr<Communicator> comm,
                       std::vector<int64_t> numels,
                       std::vector<std::vector<int>> units,
                       ZeroOptions options,
                       const OptimizerFactory& makeOptimizer)
    : comm_(requireCommunicator(std::move(comm))),
      options_(options),
      layout_(
          std::move(numels), std::move(units), comm_->size(), comm_->rank(), options.alignElements),
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
        " was produced twice in one backward pass (call step() or finalize between passes)");
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
  optimizer_->beginStep();
  for (int u = 0; u < layout_.numUnits(); ++u) updateShard(u);
  publishParameters();
}

void ZeroEngine::Impl::updateShard(int unit) {
  const ShardPlan& plan = layout_.plan(unit);
  const auto count = static_cast<size_t>(plan.shardNumel());
  const auto begin = static_cast<size_t>(layout_.shardOffset(unit));
  const auto* grads = static_cast<const std::byte*>(ownedGradients(unit).data());
  float* params = ownedMaster(unit);
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
  impl_->checkIdle("setting hyperparameters");
  impl_->optimizer_->setOptions(sgd, adam);
}
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
