// The fake device backend of the runtime's unit tests: see fake_device_backend.h.
#include "fake_device_backend.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/device_backend.h"
#include "backend/factory.h"
#include "backend/options.h"
#include "chorus/error.h"

namespace chorus::testing {
namespace {

std::atomic<bool> hangs{false};
std::atomic<bool> peerGone{false};
std::atomic<bool> connectWaits{false};
std::atomic<bool> stopsLate{false};
std::atomic<int> enqueueFailsOn{-1};
std::atomic<int> calls{0};
std::atomic<int> onCallerStreamCalls{0};
std::atomic<int> made{0};
std::atomic<int> splits{0};

// Shared by a backend and its completions: the abort reason, once aborted, and whether its
// stream is stuck.
struct FakeState {
  std::mutex mutex;
  std::exception_ptr failure;
  // Like a CUDA stream, work ends in order: once some never ends, neither does any after it.
  std::atomic<bool> stuck{false};
  void throwIfFailed() {
    std::lock_guard lock(mutex);
    if (failure)
      std::rethrow_exception(failure);
  }
};

class FakeCompletion final : public backend::DeviceCompletion {
 public:
  FakeCompletion(std::shared_ptr<FakeState> state, bool ends)
      : state_(std::move(state)), ends_(ends) {}
  bool isCompleted() override {
    state_->throwIfFailed();
    if (peerGone.load())  // as NCCL says it: a closed socket, no rank named
      throw PeerError("fake NCCL: remote process exited or there was a network error", -1);
    return ends_;
  }
  bool deviceStopped() noexcept override {
    if (ends_)
      return true;
    std::lock_guard lock(state_->mutex);  // work that never ends stops at an abort, or later
    return state_->failure != nullptr && !stopsLate.load();
  }
  void orderBefore(backend::StreamHandle) override { state_->throwIfFailed(); }
  void synchronize(Deadline deadline) override {
    while (!isCompleted()) {
      if (deadline.expired())
        throw TimeoutError("fake device work did not end by the deadline");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  std::shared_ptr<FakeState> state_;
  const bool ends_;
};

class FakeDeviceBackend final : public backend::Backend, public backend::DeviceBackend {
 public:
  explicit FakeDeviceBackend(const backend::BackendOptions& options)
      : rank_(options.rank), size_(options.size), device_(options.device) {}

  std::string name() const override { return "fake-device"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  backend::DeviceBackend* deviceBackend() override { return this; }
  void allreduce(const backend::CallContext&, const AllreduceArgs&) override { refuse(); }
  void reduceScatter(const backend::CallContext&, const ReduceScatterArgs&) override { refuse(); }
  void allgather(const backend::CallContext&, const AllgatherArgs&) override { refuse(); }
  void broadcast(const backend::CallContext&, const BroadcastArgs&) override { refuse(); }
  void reduce(const backend::CallContext&, const ReduceArgs&) override { refuse(); }
  void gather(const backend::CallContext&, const GatherArgs&) override { refuse(); }
  void scatter(const backend::CallContext&, const ScatterArgs&) override { refuse(); }
  void allToAll(const backend::CallContext&, const AllToAllArgs&) override { refuse(); }
  void allToAllV(const backend::CallContext&, const AllToAllVArgs&) override { refuse(); }
  void barrier(const backend::CallContext&) override { refuse(); }
  void send(const backend::CallContext&, const void*, size_t, int, int) override { refuse(); }
  void recv(const backend::CallContext&, void*, size_t, int, int) override { refuse(); }
  void abort(std::exception_ptr reason) noexcept override {
    std::lock_guard lock(state_->mutex);
    if (!state_->failure)
      state_->failure = reason;
  }
  void close() noexcept override {}

  int cudaDevice() const override { return device_; }
  void checkSupported(const Fingerprint& fingerprint) const override {
    if (fingerprint.reduceOp == static_cast<uint8_t>(ReduceOp::kBxor))
      throw UnsupportedError("the fake device has no bxor, as NCCL has none");
  }
  backend::StreamHandle stream() const override { return 0; }
  void startAfter(backend::StreamHandle, bool onCallerStream) override {
    state_->throwIfFailed();
    if (onCallerStream)
      ++onCallerStreamCalls;
  }
  void allreduce(const backend::DeviceCallContext& c, const AllreduceArgs&) override { count(c); }
  void reduceScatter(const backend::DeviceCallContext& c, const ReduceScatterArgs&) override {
    count(c);
  }
  void allgather(const backend::DeviceCallContext& c, const AllgatherArgs&) override { count(c); }
  void broadcast(const backend::DeviceCallContext& c, const BroadcastArgs&) override { count(c); }
  void reduce(const backend::DeviceCallContext& c, const ReduceArgs&) override { count(c); }
  void gather(const backend::DeviceCallContext& c, const GatherArgs&) override { count(c); }
  void scatter(const backend::DeviceCallContext& c, const ScatterArgs&) override { count(c); }
  void allToAll(const backend::DeviceCallContext& c, const AllToAllArgs&) override { count(c); }
  void barrier(const backend::DeviceCallContext& c) override { count(c); }
  void send(const backend::DeviceCallContext& c, const void*, size_t, int, int) override {
    count(c);
  }
  void recv(const backend::DeviceCallContext& c, void*, size_t, int, int) override { count(c); }
  void copy(void* to, const void* from, size_t bytes) override {
    if (bytes > 0 && to != from)
      std::memmove(to, from, bytes);
  }
  void copyRows(void* to,
                size_t toPitch,
                const void* from,
                size_t fromPitch,
                size_t rowBytes,
                size_t rows) override {
    for (size_t row = 0; row < rows; ++row) {
      std::memmove(static_cast<char*>(to) + row * toPitch,
                   static_cast<const char*>(from) + row * fromPitch, rowBytes);
    }
  }
  void* scratch(size_t bytes) override {
    if (scratch_.size() < bytes)
      scratch_.resize(bytes);
    return scratch_.data();
  }
  std::shared_ptr<backend::DeviceCompletion> recordEnd() override {
    state_->throwIfFailed();
    if (hangs.load())
      state_->stuck.store(true);
    return std::make_shared<FakeCompletion>(state_, !state_->stuck.load());
  }
  std::shared_ptr<backend::DeviceCompletion> recordStop() noexcept override {
    if (hangs.load())
      state_->stuck.store(true);
    return std::make_shared<FakeCompletion>(state_, !state_->stuck.load());
  }
  std::unique_ptr<backend::Backend> split(int color,
                                          int,
                                          const backend::BackendOptions& options) override {
    state_->throwIfFailed();
    ++splits;
    if (color < 0)
      return nullptr;
    backend::BackendOptions child = options;
    child.device = device_;
    return std::make_unique<FakeDeviceBackend>(child);
  }

 private:
  [[noreturn]] static void refuse() {
    throw UnsupportedError("the fake device backend takes no host-memory calls");
  }
  void count(const backend::DeviceCallContext& call) {
    state_->throwIfFailed();
    if (enqueueFailsOn.load() == rank_)  // as NCCL refusing this rank's pointer
      throw InvalidArgumentError("fake NCCL: invalid argument on this rank alone");
    // As NCCL's enqueue connecting to a peer that never calls: it waits until the communicator
    // is aborted (then fails as NCCL does, naming nobody) or the call's deadline passes.
    while (connectWaits.load()) {
      {
        std::lock_guard lock(state_->mutex);
        if (state_->failure)
          throw InvalidArgumentError("fake NCCL: invalid usage: the communicator was aborted");
      }
      if (call.deadline.expired())
        throw TimeoutError("fake NCCL: the enqueue did not finish by the deadline");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ++calls;
  }

  const int rank_;
  const int size_;
  const int device_;
  std::shared_ptr<FakeState> state_ = std::make_shared<FakeState>();
  std::vector<std::byte> scratch_;
};

std::unique_ptr<backend::Backend> makeFake(const backend::BackendOptions& options) {
  ++made;
  return std::make_unique<FakeDeviceBackend>(options);
}

}  // namespace

void installFakeDeviceBackend() { backend::setDeviceBackendMakerForTesting(&makeFake); }
void setFakeDeviceHangs(bool value) { hangs.store(value); }
void setFakeDeviceStopsLate(bool value) { stopsLate.store(value); }
void setFakeDevicePeerGone(bool value) { peerGone.store(value); }
void setFakeDeviceConnectWaits(bool value) { connectWaits.store(value); }
void setFakeDeviceEnqueueFailsOn(int rank) { enqueueFailsOn.store(rank); }
int fakeDeviceCalls() { return calls.load(); }
int fakeDeviceCallsOnCallerStream() { return onCallerStreamCalls.load(); }
int fakeDeviceBackendsMade() { return made.load(); }
int fakeDeviceSplits() { return splits.load(); }

}  // namespace chorus::testing
