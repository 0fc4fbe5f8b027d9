// The nccl backend's collectives: see nccl_backend.h.
#include "backend/nccl/nccl_backend.h"

#include <chrono>

#include "backend/nccl/backoff.h"
#include "backend/nccl/nccl_status.h"
#include "backend/nccl/nccl_types.h"
#include "backend/options.h"
#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend::nccl {
namespace {

cudaStream_t asStream(StreamHandle handle) { return reinterpret_cast<cudaStream_t>(handle); }

// Whether two handles are one stream: cudaStreamPerThread names a different one on each thread,
// so it is never taken for the same.
bool sameStream(cudaStream_t a, cudaStream_t b) { return a == b && a != cudaStreamPerThread; }

// The calls of one NCCL group (ncclGroupStart ... ncclGroupEnd): keeps the first failure of the
// calls inside, which NCCL may report there rather than at ncclGroupEnd.
class Group {
 public:
  Group() { keep(ncclGroupStart()); }
  void keep(ncclResult_t result) {
    if (first_ == ncclSuccess && result != ncclSuccess && result != ncclInProgress)
      first_ = result;
  }
  void keep(cudaError_t result) {
    if (first_ == ncclSuccess && result != cudaSuccess)
      first_ = ncclUnhandledCudaError;
  }
  // Ends the group; the first failure inside it, else ncclGroupEnd's answer.
  ncclResult_t end() {
    const ncclResult_t ended = ncclGroupEnd();
    return first_ != ncclSuccess ? first_ : ended;
  }

 private:
  ncclResult_t first_ = ncclSuccess;
};

// The end of the work enqueued up to one recordEnd(): an event on the backend's stream.
class NcclCompletion final : public DeviceCompletion {
 public:
  // `event` is recorded on `stream` by the caller.
  NcclCompletion(std::shared_ptr<NcclState> state, cudaEvent_t event, cudaStream_t stream)
      : state_(std::move(state)), event_(event), stream_(stream) {}
  ~NcclCompletion() override { state_->returnEvent(event_); }

  cudaEvent_t event() const { return event_; }

  bool isCompleted() override {
    state_->throwIfFailed();
    const cudaError_t result = cudaEventQuery(event_);
    if (result == cudaErrorNotReady)
      return false;
    checkCuda(result, "cudaEventQuery", state_->worldRank());
    return true;
  }

  // The end event has passed on the stream (or the device failed, and runs nothing more).
  bool deviceStopped() noexcept override { return cudaEventQuery(event_) != cudaErrorNotReady; }

  void orderBefore(StreamHandle stream) override {
    if (sameStream(asStream(stream), stream_))
      return;  // a blocking call's own stream is in order already
    checkCuda(cudaStreamWaitEvent(asStream(stream), event_, 0), "cudaStreamWaitEvent",
              state_->worldRank());
  }

  void synchronize(Deadline deadline) override {
    // Polled, not cudaEventSynchronize: NCCL errors and aborts must end the wait, and so must the
    // deadline. Pauses of at most 100 us: a collective's end is usually microseconds away.
    Backoff backoff(std::chrono::microseconds(100));
    while (!isCompleted()) {
      if (deadline.expired()) {
        state_->fail(std::make_exception_ptr(TimeoutError(detail::concat(
            "rank ", state_->worldRank(),
            " (this process): the nccl backend's work did not "
            "finish by the deadline (CHORUS_TIMEOUT); its communicator was aborted. A rank may "
            "have stopped calling, or called a different collective"))));
        state_->throwIfFailed();
      }
      backoff.pause();
    }
  }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t event_;
  cudaStream_t stream_;
};

}  // namespace

NcclState::~NcclState() {
  for (cudaEvent_t event : freeEvents_) cudaEventDestroy(event);
}

cudaEvent_t NcclState::takeEvent() {
  {
    std::lock_guard<std::mutex> lock(eventsMutex_);
    if (!freeEvents_.empty()) {
      cudaEvent_t event = freeEvents_.back();
      freeEvents_.pop_back();
      return event;
    }
  }
  cudaEvent_t event = nullptr;
  checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags",
            worldRank_);
  return event;
}

void NcclState::returnEvent(cudaEvent_t event) noexcept {
  std::lock_guard<std::mutex> lock(eventsMutex_);
  freeEvents_.push_back(event);
}

void NcclState::fail(std::exception_ptr reason) noexcept {
  if (!reason)  // Backend::abort allows none; the latched failure must still say something
    reason = std::make_exception_ptr(InternalError(
        detail::concat("rank ", worldRank_, " (this process): the nccl backend was aborted")));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_)
      failure_ = reason;
  }
  failed_.store(true, std::memory_order_release);
  comm_->abort();
}

void NcclState::throwIfFailed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_)
      std::rethrow_exception(failure_);
  }
  const ncclResult_t state = comm_->asyncError();
  if (state == ncclSuccess || state == ncclInProgress)
    return;
  try {
    checkNccl(state, "an NCCL operation", worldRank_, "reported asynchronously");
  } catch (...) {
    fail(std::current_exception());
    throw;
  }
}

NcclBackend::NcclBackend(std::unique_ptr<NcclCommunicator> comm, std::vector<int> worldRanks)
    : worldRanks_(std::move(worldRanks)),
      rank_(comm->rank()),
      size_(comm->size()),
      device_(comm->device()) {
  if (worldRanks_.empty()) {
    for (int r = 0; r < size_; ++r) worldRanks_.push_back(r);
  }
  state_ = std::make_shared<NcclState>(std::move(comm), worldRanks_[rank_]);
  checkCudaHere(cudaSetDevice(device_), "cudaSetDevice");
  checkCudaHere(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags");
  checkCudaHere(cudaEventCreateWithFlags(&startEvent_, cudaEventDisableTiming),
                "cudaEventCreateWithFlags");
  checkCudaHere(cudaEventCreateWithFlags(&handoffEvent_, cudaEventDisableTiming),
                "cudaEventCreateWithFlags");
  callStream_ = lastStream_ = stream_;
}

NcclBackend::~NcclBackend() { close(); }

void NcclBackend::checkCudaHere(cudaError_t result, const char* call) {
  checkCuda(result, call, worldRanks_[rank_]);
}

void NcclBackend::refuseHostMemory(std::string_view op) const {
  throw UnsupportedError(detail::concat(
      "rank ", worldRanks_[rank_], " (this process): ", op,
      ": backend 'nccl' runs CUDA tensors "
      "only, and these are in host memory; use backend 'auto', which runs host tensors on shm or "
      "tcp and CUDA tensors on nccl"));
}

// The host-memory Backend methods.
void NcclBackend::allreduce(const CallContext&, const AllreduceArgs&) {
  refuseHostMemory("allreduce");
}
void NcclBackend::reduceScatter(const CallContext&, const ReduceScatterArgs&) {
  refuseHostMemory("reduce_scatter");
}
void NcclBackend::allgather(const CallContext&, const AllgatherArgs&) {
  refuseHostMemory("allgather");
}
void NcclBackend::broadcast(const CallContext&, const BroadcastArgs&) {
  refuseHostMemory("broadcast");
}
void NcclBackend::reduce(const CallContext&, const ReduceArgs&) { refuseHostMemory("reduce"); }
void NcclBackend::gather(const CallContext&, const GatherArgs&) { refuseHostMemory("gather"); }
void NcclBackend::scatter(const CallContext&, const ScatterArgs&) { refuseHostMemory("scatter"); }
void NcclBackend::allToAll(const CallContext&, const AllToAllArgs&) {
  refuseHostMemory("all_to_all");
}
void NcclBackend::allToAllV(const CallContext&, const AllToAllVArgs&) {
  refuseHostMemory("all_to_all_v");
}
void NcclBackend::barrier(const CallContext&) { refuseHostMemory("barrier"); }
void NcclBackend::send(const CallContext&, const void*, size_t, int, int) {
  refuseHostMemory("send");
}
void NcclBackend::recv(const CallContext&, void*, size_t, int, int) { refuseHostMemory("recv"); }

void NcclBackend::abort(std::exception_ptr reason) noexcept { state_->fail(reason); }

void NcclBackend::close() noexcept {
  if (stream_ == nullptr)
    return;
  cudaSetDevice(device_);
  if (!sameStream(lastStream_, stream_) && lastEndEvent_ != nullptr)
    cudaStreamWaitEvent(stream_, lastEndEvent_, 0);  // the scratch's last use may be there
  lastEnd_.reset();
  if (scratch_ != nullptr)
    cudaFreeAsync(scratch_, stream_);
  cudaEventDestroy(startEvent_);
  cudaEventDestroy(handoffEvent_);
  cudaStreamDestroy(stream_);  // returns at once; the stream is freed once its work is done
  stream_ = nullptr;
  scratch_ = nullptr;
}

// Note [Enqueue on a non-blocking communicator]
// On a communicator of more than one rank, NCCL (2.2x) ends every non-blocking call's implicit
// group by starting a thread that launches it, and answers ncclInProgress until that thread is
// done: tens of microseconds, every call (a blocking communicator launches on the caller's
// thread; a one-rank one needs no launch thread). The wait used to sleep between questions, 8 us
// then 16 us and up, and a Linux sleep lasts at least about 60 us: on the GPU machine, with two
// ranks, a call took about 120 us in C++ against torch's 33 us from Python. So the enqueue asks
// without sleeping for kLaunchSpin, which covers a launch many times over; what takes longer is
// a setup (NCCL connects a pair of ranks on their first call), which sleeps between questions.
constexpr std::chrono::microseconds kLaunchSpin(2000);

template <typename Use>
void NcclBackend::enqueue(const char* what, const DeviceCallContext& call, Use use) {
  state_->throwIfLatched();
  NcclCommunicator& comm = state_->comm();
  try {
    comm.settle(comm.call(use), what, call.deadline, kLaunchSpin);
  } catch (...) {
    // An abort from elsewhere (a failed host check) ends a waiting enqueue with NCCL's "invalid
    // usage": raise the abort's reason, which explains it, rather than that.
    state_->fail(std::current_exception());
    state_->throwIfFailed();  // always throws: a failure is latched now
  }
}

void NcclBackend::checkSupported(const Fingerprint& fingerprint) const {
  if (fingerprint.reduceOp != Fingerprint::kNoReduceOp &&
      fingerprint.dataType != Fingerprint::kNoDataType) {
    ncclOpOf(static_cast<ReduceOp>(fingerprint.reduceOp),
             static_cast<DataType>(fingerprint.dataType), worldRanks_[rank_]);
  }
}

// Note [Blocking calls on the caller's stream]
// A call made under BlockingCalls (chorus's blocking calls from Python, chorus-bench) runs on
// the caller's stream itself, as torch's NCCL backend does since 2.7 for calls without async_op:
// no start event, no cross-stream wait there and back (on the GPU machine that plumbing cost
// 1.0 us of host time per call against 0.3 us; docs/performance_gpu.md). An async call runs on the
// backend's own stream, after an event on the caller's. Either way a call is ordered after the
// backend's previous one wherever that ran, so its work ends in call order, as NCCL requires of
// one communicator and the watchdog assumes: when the stream changes, the new one waits for the
// previous call's end event (only that call, nothing else queued on its stream since, and no
// use of a caller's stream that may be gone by now).
void NcclBackend::startAfter(StreamHandle callerStream, bool onCallerStream) {
  state_->throwIfLatched();
  cudaStream_t caller = asStream(callerStream);
  cudaStream_t target = onCallerStream ? caller : stream_;
  if (!onCallerStream) {
    checkCudaHere(cudaEventRecord(startEvent_, caller), "cudaEventRecord");
    checkCudaHere(cudaStreamWaitEvent(stream_, startEvent_, 0), "cudaStreamWaitEvent");
  }
  // Already ordered after the previous call: on its stream, or (async) through the start event
  // on the stream it ran on.
  const bool ordered =
      sameStream(lastStream_, target) || (!onCallerStream && sameStream(lastStream_, caller));
  if (!ordered)
    orderAfterLast(target);
  callStream_ = target;
  lastStream_ = target;
  lastEnd_.reset();  // recordEnd() sets it; a call that fails before has none
  lastEndEvent_ = nullptr;
}

void NcclBackend::orderAfterLast(cudaStream_t stream) {
  cudaEvent_t after = lastEndEvent_;
  if (after == nullptr) {  // the previous call ended without its end event (it failed midway)
    checkCudaHere(cudaEventRecord(handoffEvent_, lastStream_), "cudaEventRecord");
    after = handoffEvent_;
  }
  checkCudaHere(cudaStreamWaitEvent(stream, after, 0), "cudaStreamWaitEvent");
}

void NcclBackend::allreduce(const DeviceCallContext& call, const AllreduceArgs& args) {
  const ncclRedOp_t op = ncclOpOf(args.op, args.dtype, worldRanks_[rank_]);
  enqueue("ncclAllReduce", call, [&](ncclComm_t comm) {
    return ncclAllReduce(args.input, args.output, args.count * ncclPartsPerElement(args.dtype),
                         ncclTypeOf(args.dtype), op, comm, callStream_);
  });
}

void NcclBackend::reduceScatter(const DeviceCallContext& call, const ReduceScatterArgs& args) {
  const ncclRedOp_t op = ncclOpOf(args.op, args.dtype, worldRanks_[rank_]);
  enqueue("ncclReduceScatter", call, [&](ncclComm_t comm) {
    return ncclReduceScatter(args.input, args.output,
                             args.countPerRank * ncclPartsPerElement(args.dtype),
                             ncclTypeOf(args.dtype), op, comm, callStream_);
  });
}

void NcclBackend::allgather(const DeviceCallContext& call, const AllgatherArgs& args) {
  enqueue("ncclAllGather", call, [&](ncclComm_t comm) {
    return ncclAllGather(args.input, args.output, args.bytesPerRank, ncclUint8, comm, callStream_);
  });
}

void NcclBackend::broadcast(const DeviceCallContext& call, const BroadcastArgs& args) {
  enqueue("ncclBroadcast", call, [&](ncclComm_t comm) {
    return ncclBroadcast(args.input, args.output, args.bytes, ncclUint8, args.root, comm,
                         callStream_);
  });
}

void NcclBackend::reduce(const DeviceCallContext& call, const ReduceArgs& args) {
  const ncclRedOp_t op = ncclOpOf(args.op, args.dtype, worldRanks_[rank_]);
  // NCCL writes recvbuff on the root only, but wants a valid pointer everywhere.
  void* output = args.output != nullptr ? args.output : const_cast<void*>(args.input);
  enqueue("ncclReduce", call, [&](ncclComm_t comm) {
    return ncclReduce(args.input, output, args.count * ncclPartsPerElement(args.dtype),
                      ncclTypeOf(args.dtype), op, args.root, comm, callStream_);
  });
}

// Grouped point-to-point (gather, scatter, all_to_all): the sends and receives of one group start
// together, so no order among them can deadlock.
void NcclBackend::gather(const DeviceCallContext& call, const GatherArgs& args) {
  const size_t bytes = args.bytesPerRank;
  enqueue("ncclGroupEnd (gather)", call, [&](ncclComm_t comm) {
    Group group;
    if (rank_ == args.root) {
      auto* out = static_cast<std::byte*>(args.output);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) {
          group.keep(cudaMemcpyAsync(out + peer * bytes, args.input, bytes,
                                     cudaMemcpyDeviceToDevice, callStream_));
        } else {
          group.keep(ncclRecv(out + peer * bytes, bytes, ncclUint8, peer, comm, callStream_));
        }
      }
    } else {
      group.keep(ncclSend(args.input, bytes, ncclUint8, args.root, comm, callStream_));
    }
    return group.end();
  });
}

void NcclBackend::scatter(const DeviceCallContext& call, const ScatterArgs& args) {
  const size_t bytes = args.bytesPerRank;
  enqueue("ncclGroupEnd (scatter)", call, [&](ncclComm_t comm) {
    Group group;
    if (rank_ == args.root) {
      const auto* in = static_cast<const std::byte*>(args.input);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) {
          group.keep(cudaMemcpyAsync(args.output, in + peer * bytes, bytes,
                                     cudaMemcpyDeviceToDevice, callStream_));
        } else {
          group.keep(ncclSend(in + peer * bytes, bytes, ncclUint8, peer, comm, callStream_));
        }
      }
    } else {
      group.keep(ncclRecv(args.output, bytes, ncclUint8, args.root, comm, callStream_));
    }
    return group.end();
  });
}

void NcclBackend::allToAll(const DeviceCallContext& call, const AllToAllArgs& args) {
  const size_t bytes = args.bytesPerRank;
  const auto* in = static_cast<const std::byte*>(args.input);
  auto* out = static_cast<std::byte*>(args.output);
  enqueue("ncclGroupEnd (all_to_all)", call, [&](ncclComm_t comm) {
    Group group;
    for (int peer = 0; peer < size_; ++peer) {
      group.keep(ncclSend(in + peer * bytes, bytes, ncclUint8, peer, comm, callStream_));
      group.keep(ncclRecv(out + peer * bytes, bytes, ncclUint8, peer, comm, callStream_));
    }
    return group.end();
  });
}

void NcclBackend::barrier(const DeviceCallContext& call) {
  void* flag = scratch(sizeof(int32_t));
  enqueue("ncclAllReduce (barrier)", call, [&](ncclComm_t comm) {
    return ncclAllReduce(flag, flag, 1, ncclInt32, ncclSum, comm, callStream_);
  });
}

void NcclBackend::send(
    const DeviceCallContext& call, const void* data, size_t bytes, int peer, int /*tag*/) {
  enqueue("ncclSend", call, [&](ncclComm_t comm) {
    return ncclSend(data, bytes, ncclUint8, peer, comm, callStream_);
  });
}

void NcclBackend::recv(const DeviceCallContext& call, void* data, size_t bytes, int peer, int) {
  enqueue("ncclRecv", call, [&](ncclComm_t comm) {
    return ncclRecv(data, bytes, ncclUint8, peer, comm, callStream_);
  });
}

void NcclBackend::copy(void* to, const void* from, size_t bytes) {
  if (bytes == 0 || to == from)
    return;
  checkCudaHere(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, callStream_),
                "cudaMemcpyAsync");
}

void NcclBackend::copyRows(
    void* to, size_t toPitch, const void* from, size_t fromPitch, size_t rowBytes, size_t rows) {
  if (rowBytes == 0 || rows == 0)
    return;
  checkCudaHere(cudaMemcpy2DAsync(to, toPitch, from, fromPitch, rowBytes, rows,
                                  cudaMemcpyDeviceToDevice, callStream_),
                "cudaMemcpy2DAsync");
}

void* NcclBackend::scratch(size_t bytes) {
  if (bytes > scratchBytes_) {
    // Stream-ordered: the old buffer is freed after the work already queued on it.
    if (scratch_ != nullptr)
      checkCudaHere(cudaFreeAsync(scratch_, callStream_), "cudaFreeAsync");
    scratch_ = nullptr;
    scratchBytes_ = 0;
    checkCudaHere(cudaMallocAsync(&scratch_, bytes, callStream_), "cudaMallocAsync");
    scratchBytes_ = bytes;
  }
  return scratch_;
}

std::shared_ptr<DeviceCompletion> NcclBackend::recordEnd() {
  state_->throwIfLatched();
  auto completion = std::make_shared<NcclCompletion>(state_, state_->takeEvent(), callStream_);
  checkCudaHere(cudaEventRecord(completion->event(), callStream_), "cudaEventRecord");
  lastEnd_ = completion;  // keeps its event from going back to the pool while it orders the next
  lastEndEvent_ = completion->event();
  return completion;
}

std::shared_ptr<DeviceCompletion> NcclBackend::recordStop() noexcept {
  try {
    auto completion = std::make_shared<NcclCompletion>(state_, state_->takeEvent(), callStream_);
    if (cudaEventRecord(completion->event(), callStream_) != cudaSuccess)
      return nullptr;
    return completion;
  } catch (...) {
    return nullptr;
  }
}

std::unique_ptr<Backend> NcclBackend::split(int color, int key, const BackendOptions& options) {
  state_->throwIfFailed();
  const int worldRank = worldRanks_[rank_];
  std::unique_ptr<NcclCommunicator> child;
  try {
    child = state_->comm().split(color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                 {.rank = options.rank,
                                  .size = options.size,
                                  .device = device_,
                                  .worldRank = worldRank,
                                  .name = "chorus:" + options.scope,
                                  .deadline = options.deadline});
  } catch (...) {
    state_->fail(std::current_exception());
    throw;
  }
  if (child == nullptr)
    return nullptr;
  return std::make_unique<NcclBackend>(std::move(child), options.worldRanks);
}

}  // namespace chorus::backend::nccl
