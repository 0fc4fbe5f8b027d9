// NcclBackend: collectives on CUDA memory through NCCL, for one communicator (DESIGN §6: a stream
// per communicator, ordered by events, no host wait on the common path). See device_backend.h for
// how the runtime drives it (Note [Device call order]).
//
// Each backend owns one non-blocking NCCL communicator (nccl_communicator.h) on one device and a
// stream of its own (cudaStreamNonBlocking: it never syncs implicitly with the legacy default
// stream; every ordering is an explicit event). Blocking calls run on the caller's stream instead
// (Note [Blocking calls on the caller's stream] in nccl_backend.cc). Collectives map one to one
// onto NCCL's (allreduce, reduce_scatter, allgather, broadcast, reduce); gather, scatter and
// all_to_all are grouped ncclSend/ncclRecv; barrier is a one-element allreduce that the runtime
// waits for. Send and recv ignore the tag (NCCL has none): messages between two ranks match in call
// order.
//
// Failures (a failed NCCL call, an asynchronous NCCL error, a deadline, abort()) latch: the first
// is kept, the communicator is aborted (ncclCommAbort), and every later call and every
// completion rethrows it. Host-memory calls (the Backend methods) are UnsupportedError: backend
// "auto" runs host tensors on shm/tcp and CUDA tensors here.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_backend.h"
#include "backend/nccl/nccl_communicator.h"
#include "core/thread_annotations.h"

namespace chorus::backend::nccl {

// What the backend and its completions share: completions may outlive the backend (a Work kept
// by the program), so the communicator and the failure latch live here.
class NcclState {
 public:
  NcclState(std::unique_ptr<NcclCommunicator> comm, int worldRank)
      : comm_(std::move(comm)), worldRank_(worldRank) {}

  ~NcclState();

  NcclCommunicator& comm() { return *comm_; }
  int worldRank() const { return worldRank_; }
  // Events for completions, reused: cudaEventCreate and cudaEventDestroy on every call would cost
  // about a microsecond each. An event goes back once its completion is dropped; a stream that
  // waited on it took its state when the wait was queued, so reusing it is safe. Any thread.
  cudaEvent_t takeEvent();
  void returnEvent(cudaEvent_t event) noexcept;
  // Keeps the first failure and aborts the communicator. Any thread.
  void fail(std::exception_ptr reason) noexcept;
  // Rethrows the latched failure, if any; else turns an asynchronous NCCL error into one.
  void throwIfFailed();
  // Rethrows the latched failure, if any: one atomic load when there is none. The call path uses
  // it; NCCL's asynchronous errors reach it through the completions (and the watchdog's polls),
  // and a call on a communicator with one fails at its enqueue anyway.
  void throwIfLatched() {
    if (failed_.load(std::memory_order_acquire))
      throwIfFailed();
  }

 private:
  std::mutex mutex_;
  std::exception_ptr failure_ CHORUS_GUARDED_BY(mutex_);
  std::atomic<bool> failed_{false};  // failure_ is set
  std::unique_ptr<NcclCommunicator> comm_;
  int worldRank_;
  std::mutex eventsMutex_;
  std::vector<cudaEvent_t> freeEvents_ CHORUS_GUARDED_BY(eventsMutex_);
};

class NcclBackend final : public Backend, public DeviceBackend {
 public:
  // Takes over `comm` (made on `device`); makes the stream. `worldRanks`: the members' world
  // ranks in rank order (for messages).
  NcclBackend(std::unique_ptr<NcclCommunicator> comm, std::vector<int> worldRanks);
  ~NcclBackend() override;

  // Backend: identity, and host-memory calls refused.
  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  DeviceBackend* deviceBackend() override { return this; }
  void allreduce(const CallContext& call, const AllreduceArgs& args) override;
  void reduceScatter(const CallContext& call, const ReduceScatterArgs& args) override;
  void allgather(const CallContext& call, const AllgatherArgs& args) override;
  void broadcast(const CallContext& call, const BroadcastArgs& args) override;
  void reduce(const CallContext& call, const ReduceArgs& args) override;
  void gather(const CallContext& call, const GatherArgs& args) override;
  void scatter(const CallContext& call, const ScatterArgs& args) override;
  void allToAll(const CallContext& call, const AllToAllArgs& args) override;
  void allToAllV(const CallContext& call, const AllToAllVArgs& args) override;
  void barrier(const CallContext& call) override;
  void send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) override;
  void recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) override;
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;

  // DeviceBackend.
  int cudaDevice() const override { return device_; }
  StreamHandle stream() const override { return reinterpret_cast<StreamHandle>(stream_); }
  void checkSupported(const Fingerprint& fingerprint) const override;
  void startAfter(StreamHandle callerStream, bool onCallerStream) override;
  void allreduce(const DeviceCallContext& call, const AllreduceArgs& args) override;
  void reduceScatter(const DeviceCallContext& call, const ReduceScatterArgs& args) override;
  void allgather(const DeviceCallContext& call, const AllgatherArgs& args) override;
  void broadcast(const DeviceCallContext& call, const BroadcastArgs& args) override;
  void reduce(const DeviceCallContext& call, const ReduceArgs& args) override;
  void gather(const DeviceCallContext& call, const GatherArgs& args) override;
  void scatter(const DeviceCallContext& call, const ScatterArgs& args) override;
  void allToAll(const DeviceCallContext& call, const AllToAllArgs& args) override;
  void barrier(const DeviceCallContext& call) override;
  void send(
      const DeviceCallContext& call, const void* data, size_t bytes, int peer, int tag) override;
  void recv(const DeviceCallContext& call, void* data, size_t bytes, int peer, int tag) override;
  void copy(void* to, const void* from, size_t bytes) override;
  void copyRows(void* to,
                size_t toPitch,
                const void* from,
                size_t fromPitch,
                size_t rowBytes,
                size_t rows) override;
  void* scratch(size_t bytes) override;
  std::shared_ptr<DeviceCompletion> recordEnd() override;
  std::shared_ptr<DeviceCompletion> recordStop() noexcept override;
  std::unique_ptr<Backend> split(int color, int key, const BackendOptions& options) override;

 private:
  // Runs one NCCL call (or group) on the communicator and settles it; a failure latches.
  template <typename Use>
  void enqueue(const char* what, const DeviceCallContext& call, Use use);
  [[noreturn]] void refuseHostMemory(std::string_view op) const;
  void checkCudaHere(cudaError_t result, const char* call);

  std::shared_ptr<NcclState> state_;
  std::vector<int> worldRanks_;
  int rank_;
  int size_;
  int device_;
  // Makes `stream` wait for the previous call's work (its end event, else what lastStream_ holds).
  void orderAfterLast(cudaStream_t stream);

  cudaStream_t stream_ = nullptr;       // the backend's own stream (async calls)
  cudaStream_t callStream_ = nullptr;   // where the current call enqueues: stream_ or the caller's
  cudaStream_t lastStream_ = nullptr;   // where the previous call enqueued
  cudaEvent_t startEvent_ = nullptr;    // reused: a wait takes the event's state when it is queued
  cudaEvent_t handoffEvent_ = nullptr;  // orderAfterLast's fallback; reused
  std::shared_ptr<DeviceCompletion> lastEnd_;  // the previous call's end, while it orders the next
  cudaEvent_t lastEndEvent_ = nullptr;         // its event
  void* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

}  // namespace chorus::backend::nccl
