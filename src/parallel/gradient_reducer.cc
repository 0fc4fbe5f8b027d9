// GradientReducer: buckets of gradients averaged with one async allreduce each (see the contract in
// include/chorus/gradient_reducer.h). Bucket buffers are allocated here, zeroed (which also faults
// their pages in before the first backward; parallel::AlignedBuffer), and handed out as views. The
// state lives in GradientReducer::Impl, which the public methods at the end forward to.
#include "chorus/gradient_reducer.h"

#include <cstring>
#include <string>

#include "chorus/error.h"
#include "chorus/trace.h"
#include "core/copy_bytes.h"
#include "parallel/aligned_buffer.h"
#include "parallel/bucket_plan.h"
#include "parallel/wait_all.h"

namespace chorus {

// The reducer's state; the public methods below forward here.
struct GradientReducer::Impl {
  struct Storage : parallel::AlignedBuffer {
    explicit Storage(size_t bytes) : AlignedBuffer(bytes, "gradient reducer: a bucket") {}
  };
  using Location = GradientLocation;

  Impl(std::shared_ptr<Communicator> comm,
       std::vector<GradientSpec> specs,
       GradientReducerOptions options);
  ~Impl();

  int numGradients() const { return static_cast<int>(specs_.size()); }
  int numBuckets() const { return static_cast<int>(buckets_.size()); }
  size_t bucketBytes(int bucket) const;
  std::vector<int> bucketGradients(int bucket) const;
  GradientLocation location(int index) const;
  Tensor gradient(int index) const;
  Tensor bucket(int bucket) const;
  std::shared_ptr<const void> storage(int index) const;
  void markReady(int index);
  void markReady(int index, const Tensor& values);
  bool isReady(int index) const;
  std::vector<int> takeReadyBuckets();
  void markAbsent();
  const std::vector<bool>& finalize();

  std::vector<parallel::Bucket> plan(const std::vector<int>& readyOrder) const;
  void build(std::vector<parallel::Bucket> buckets);
  // Nothing ready, no bucket issued: the state at the start of every iteration.
  void startIteration();
  void checkIndex(int index, const char* what) const;
  void checkOwnsMemory(const char* what) const;
  void launchReadyBuckets();
  void rebuildFromRankZeroOrder();
  std::vector<int> observedOrder() const;

  std::shared_ptr<Communicator> comm_;
  std::vector<GradientSpec> specs_;
  GradientReducerOptions options_;
  std::vector<parallel::Bucket> buckets_;
  std::vector<std::shared_ptr<Storage>> storage_;  // one per bucket
  std::vector<Location> locations_;                // one per gradient
  std::vector<int> pendingInBucket_;
  std::vector<std::shared_ptr<Work>> inFlight_;
  std::vector<bool> ready_;
  std::vector<int> readySequence_;  // this iteration's markReady order
  std::vector<bool> usedAnywhere_;
  int nextBucketToLaunch_ = 0;
  int nextBucketToHand_ = 0;  // issueBuckets = false: buckets handed out by takeReadyBuckets()
  bool absentMarked_ = false;
  int iterations_ = 0;
  int generation_ = 0;
};

GradientReducer::Impl::Impl(std::shared_ptr<Communicator> comm,
                            std::vector<GradientSpec> specs,
                            GradientReducerOptions options)
    : comm_(std::move(comm)), specs_(std::move(specs)), options_(options) {
  if (!comm_)
    throw InvalidArgumentError("gradient reducer: no communicator");
  if (!options_.ownsMemory && options_.issueBuckets)
    throw InvalidArgumentError(
        "gradient reducer: with ownsMemory = false the caller reduces the buckets, so "
        "issueBuckets must be false");
  build(plan(parallel::reverseOrder(numGradients())));
  usedAnywhere_.assign(specs_.size(), false);
}

GradientReducer::Impl::~Impl() {
  // Operations still in flight write into our buffers: let them finish first.
  for (auto& work : inFlight_) {
    try {
      work->wait();
    } catch (const std::exception&) {  // already reported, or never asked for
    }
  }
}

std::vector<parallel::Bucket> GradientReducer::Impl::plan(
    const std::vector<int>& readyOrder) const {
  return parallel::planBuckets(specs_, readyOrder,
                               {options_.bucketBytes, options_.firstBucketBytes});
}

void GradientReducer::Impl::build(std::vector<parallel::Bucket> buckets) {
  std::vector<std::shared_ptr<Storage>> storage;
  std::vector<Location> locations(specs_.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (options_.ownsMemory)
      storage.push_back(std::make_shared<Storage>(buckets[b].nbytes()));
    for (const auto& slot : buckets[b].slots)
      locations[slot.gradient] = {static_cast<int>(b), slot.offset};
  }
  const bool rebuilding = !buckets_.empty();
  if (rebuilding)
    ++generation_;
  // Carry the current values over (a rebuild happens right after finalize(): the averages).
  if (rebuilding && options_.ownsMemory) {
    for (int i = 0; i < numGradients(); ++i) {
      size_t bytes = static_cast<size_t>(specs_[i].numel) * dataTypeSize(specs_[i].dtype);
      size_t to = static_cast<size_t>(locations[i].offset) * dataTypeSize(specs_[i].dtype);
      if (bytes > 0)
        std::memcpy(static_cast<std::byte*>(storage[locations[i].bucket]->data()) + to,
                    gradient(i).data(), bytes);
    }
  }
  buckets_ = std::move(buckets);
  storage_ = std::move(storage);
  locations_ = std::move(locations);
  startIteration();
}

void GradientReducer::Impl::startIteration() {
  ready_.assign(specs_.size(), false);
  readySequence_.clear();
  nextBucketToLaunch_ = 0;
  nextBucketToHand_ = 0;
  absentMarked_ = false;
  pendingInBucket_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    pendingInBucket_[b] = static_cast<int>(buckets_[b].slots.size());
}

size_t GradientReducer::Impl::bucketBytes(int bucket) const { return buckets_.at(bucket).nbytes(); }

GradientLocation GradientReducer::Impl::location(int index) const {
  checkIndex(index, "location");
  return locations_[index];
}

std::vector<int> GradientReducer::Impl::bucketGradients(int bucket) const {
  std::vector<int> indices;
  for (const auto& slot : buckets_.at(bucket).slots) indices.push_back(slot.gradient);
  return indices;
}

void GradientReducer::Impl::checkOwnsMemory(const char* what) const {
  if (!options_.ownsMemory)
    throw InvalidArgumentError(std::string("gradient reducer: ") + what +
                               ": the caller holds the buckets' memory (ownsMemory = false)");
}

void GradientReducer::Impl::checkIndex(int index, const char* what) const {
  if (index < 0 || index >= numGradients())
    throw InvalidArgumentError(std::string("gradient reducer: ") + what + " of gradient " +
                               std::to_string(index) + ", but there are " +
                               std::to_string(numGradients()) + " gradients");
}

Tensor GradientReducer::Impl::gradient(int index) const {
  checkIndex(index, "view");
  checkOwnsMemory("gradient()");
  const Location& at = locations_[index];
  auto* base = static_cast<std::byte*>(storage_[at.bucket]->data());
  const GradientSpec& spec = specs_[index];
  return Tensor(base + static_cast<size_t>(at.offset) * dataTypeSize(spec.dtype), spec.dtype,
                {spec.numel});
}

Tensor GradientReducer::Impl::bucket(int bucket) const {
  checkOwnsMemory("bucket()");
  const parallel::Bucket& planned = buckets_.at(bucket);
  return Tensor(storage_[bucket]->data(), planned.dtype, {planned.numel});
}

std::vector<int> GradientReducer::Impl::takeReadyBuckets() {
  std::vector<int> ready;
  for (; nextBucketToHand_ < nextBucketToLaunch_; ++nextBucketToHand_)
    ready.push_back(nextBucketToHand_);
  return ready;
}

std::shared_ptr<const void> GradientReducer::Impl::storage(int index) const {
  checkIndex(index, "storage");
  checkOwnsMemory("storage()");
  return storage_[locations_[index].bucket];
}

bool GradientReducer::Impl::isReady(int index) const {
  checkIndex(index, "readiness");
  return ready_[index];
}

void GradientReducer::Impl::markReady(int index, const Tensor& values) {
  checkIndex(index, "markReady");
  checkOwnsMemory("markReady(index, values)");
  Tensor view = gradient(index);
  if (values.dtype() != view.dtype() || values.numel() != view.numel() || !values.isContiguous())
    throw InvalidArgumentError("gradient reducer: gradient " + std::to_string(index) + " is " +
                               values.describe() + " but was registered as " + view.describe() +
                               " (contiguous)");
  if (values.data() != view.data() && view.nbytes() > 0)
    copyBytes(view.data(), values.data(), view.nbytes());
  markReady(index);
}

void GradientReducer::Impl::markReady(int index) {
  checkIndex(index, "markReady");
  if (ready_[index])
    throw InvalidArgumentError(
        "gradient reducer: gradient " + std::to_string(index) +
        " was marked ready twice in one iteration (a parameter whose gradient was produced by two "
        "backward passes between optimizer steps: run the earlier ones under no_sync(); or one "
        "used both inside and outside a torch.utils.checkpoint region with use_reentrant=True: "
        "use use_reentrant=False)");
  ready_[index] = true;
  readySequence_.push_back(index);
  --pendingInBucket_[locations_[index].bucket];
  launchReadyBuckets();
}

void GradientReducer::Impl::launchReadyBuckets() {
  while (nextBucketToLaunch_ < numBuckets() && pendingInBucket_[nextBucketToLaunch_] == 0) {
    if (options_.issueBuckets) {
      trace::Span mark("bucket launched", nextBucketToLaunch_);  // Note [Timeline]
      inFlight_.push_back(comm_->allreduce(bucket(nextBucketToLaunch_), ReduceOp::kAvg));
    }
    ++nextBucketToLaunch_;
  }
}

void GradientReducer::Impl::markAbsent() {
  if (absentMarked_)
    return;
  absentMarked_ = true;
  for (int i = 0; i < numGradients(); ++i) {
    if (!ready_[i]) {
      if (options_.ownsMemory) {
        Tensor view = gradient(i);
        if (view.nbytes() > 0)
          std::memset(view.data(), 0, view.nbytes());
      }
      --pendingInBucket_[locations_[i].bucket];
    }
  }
  launchReadyBuckets();
}

const std::vector<bool>& GradientReducer::Impl::finalize() {
  std::vector<uint8_t> used(specs_.size());
  for (int i = 0; i < numGradients(); ++i) used[i] = ready_[i] ? 1 : 0;
  markAbsent();
  if (!used.empty())
    inFlight_.push_back(
        comm_->allreduce(Tensor(used.data(), {static_cast<int64_t>(used.size())}), ReduceOp::kMax));

  parallel::waitAll(inFlight_);

  for (int i = 0; i < numGradients(); ++i) usedAnywhere_[i] = used[i] != 0;
  if (++iterations_ == 1 && options_.rebuildAfterFirstIteration)
    rebuildFromRankZeroOrder();  // reads this iteration's ready order; may build() anew
  startIteration();
  return usedAnywhere_;
}

std::vector<int> GradientReducer::Impl::observedOrder() const {
  // Gradients in the order they became ready, then the absent ones in their current plan order.
  std::vector<int> order = readySequence_;
  for (const auto& bucket : buckets_)
    for (const auto& slot : bucket.slots)
      if (!ready_[slot.gradient])
        order.push_back(slot.gradient);
  return order;
}

void GradientReducer::Impl::rebuildFromRankZeroOrder() {
  std::vector<int32_t> order;
  for (int index : observedOrder()) order.push_back(index);
  if (!order.empty())
    comm_->broadcast(Tensor(order.data(), {static_cast<int64_t>(order.size())}), 0)->wait();
  auto planned = plan(std::vector<int>(order.begin(), order.end()));
  if (planned != buckets_)
    build(std::move(planned));
}

GradientReducer::GradientReducer(std::shared_ptr<Communicator> comm,
                                 std::vector<GradientSpec> specs,
                                 GradientReducerOptions options)
    : impl_(std::make_unique<Impl>(std::move(comm), std::move(specs), options)) {}

GradientReducer::~GradientReducer() = default;

int GradientReducer::numGradients() const { return impl_->numGradients(); }
int GradientReducer::numBuckets() const { return impl_->numBuckets(); }
size_t GradientReducer::bucketBytes(int bucket) const { return impl_->bucketBytes(bucket); }
std::vector<int> GradientReducer::bucketGradients(int bucket) const {
  return impl_->bucketGradients(bucket);
}
int64_t GradientReducer::bucketNumel(int bucket) const { return impl_->buckets_.at(bucket).numel; }
DataType GradientReducer::bucketDtype(int bucket) const { return impl_->buckets_.at(bucket).dtype; }
GradientLocation GradientReducer::location(int index) const { return impl_->location(index); }
Tensor GradientReducer::gradient(int index) const { return impl_->gradient(index); }
Tensor GradientReducer::bucket(int bucket) const { return impl_->bucket(bucket); }
std::vector<int> GradientReducer::takeReadyBuckets() { return impl_->takeReadyBuckets(); }
void GradientReducer::markAbsent() { impl_->markAbsent(); }
std::shared_ptr<const void> GradientReducer::storage(int index) const {
  return impl_->storage(index);
}
int GradientReducer::generation() const { return impl_->generation_; }
void GradientReducer::markReady(int index) { impl_->markReady(index); }
void GradientReducer::markReady(int index, const Tensor& values) {
  impl_->markReady(index, values);
}
bool GradientReducer::isReady(int index) const { return impl_->isReady(index); }
int GradientReducer::bucketsIssued() const { return impl_->nextBucketToLaunch_; }
const std::vector<bool>& GradientReducer::finalize() { return impl_->finalize(); }
const std::vector<bool>& GradientReducer::usedAnywhere() const { return impl_->usedAnywhere_; }

}  // namespace chorus
