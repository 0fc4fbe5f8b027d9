// DeviceBackend: a backend that runs collectives on GPU memory, asynchronously to the host, on a
// CUDA stream of its own (the nccl backend). The host-memory Backend contract (backend.h) does
// not fit it: a call enqueues work and returns long before the work is done.
//
// Note [Device call order]
// How the runtime drives one call:
//   1. startAfter(callerStream, onCallerStream): the call's work is ordered after what the caller
//      queued so far on its current stream (the inputs' producers) and after the backend's earlier
//      work; the host does not wait. Async calls run on the backend's stream, after an event on
//      the caller's; blocking ones (onCallerStream: under BlockingCalls) on the caller's stream
//      itself, which needs no event there and back.
//   2. one or more collective methods, and copy() for staging; each only enqueues.
//   3. recordEnd(): a DeviceCompletion for everything enqueued so far. A wait makes the waiting
//      stream wait on it (orderBefore; nothing to do on the stream a blocking call ran on), and
//      the async handle keeps it; synchronize() is the host wait (synchronize=True, barrier).
// Buffers are device memory of cudaDevice(), flat and contiguous, as in collective_args.h; they
// must stay allocated until the completion is done (the runtime keeps the tensors alive).
//
// Contract: methods are called from one thread at a time, in the communicator's call order.
// Enqueuing never blocks on the device. Arguments the backend cannot serve (a reduction it lacks)
// are UnsupportedError / InvalidArgumentError, thrown before any communication is enqueued, so the
// runtime may leave the communicator working. A failure seen at enqueue (a failed communicator)
// throws a chorus::Error; a failure that happens later on the device, a dead peer or
// a deadline that passes is raised by the completion's methods and by every later call, after the
// backend aborted its communicator (abort() may be called from any thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/collective.h"
#include "core/collective_args.h"
#include "core/deadline.h"

namespace chorus::backend {

class Backend;
struct BackendOptions;

// A CUDA stream as the layers above pass it: the value of a cudaStream_t (0 is the legacy default
// stream; the per-thread default stream is cudaStreamPerThread's value, 2).
using StreamHandle = std::uintptr_t;

struct DeviceCallContext {
  Fingerprint fingerprint;
  Deadline deadline = Deadline::never();
};

// The end of the work a DeviceBackend enqueued up to a recordEnd().
class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  // Whether the device finished the work; throws the backend's failure when it failed.
  virtual bool isCompleted() = 0;
  // Makes `stream` wait for the work, without blocking the host.
  virtual void orderBefore(StreamHandle stream) = 0;
  // Blocks the host until the work is done. TimeoutError (naming the ranks when known) when
  // `deadline` passes first, after aborting the backend; the backend's failure if it failed.
  virtual void synchronize(Deadline deadline) = 0;
  // Whether the device is done with the work's memory: it finished the work, or stopped it after
  // an abort (NCCL's kernels see the abort and exit, some time after the failure is known).
  // Unlike isCompleted(), it ignores the backend's failure and never throws: after a failure, the
  // buffers must live until this is true.
  virtual bool deviceStopped() noexcept = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // The CUDA device ordinal whose memory the buffers are in.
  virtual int cudaDevice() const = 0;
  // The backend's own stream, where its work runs (for DLPack's __dlpack__(stream=...)).
  virtual StreamHandle stream() const = 0;

  // Refuses (UnsupportedError), from its fingerprint alone, a call this backend cannot run (a
  // reduction the device lacks), before the call is checked across ranks or enqueued: such a
  // refusal, the same on every rank, leaves the communicator working. Default: refuses nothing.
  virtual void checkSupported(const Fingerprint& fingerprint) const { (void)fingerprint; }
  virtual void startAfter(StreamHandle callerStream, bool onCallerStream) = 0;
  // As Backend's methods, but enqueued. allreduce takes ReduceOp::kAvg itself, and float16 /
  // bfloat16 arrive unwidened: the device reduces them.
  virtual void allreduce(const DeviceCallContext& call, const AllreduceArgs& args) = 0;
  virtual void reduceScatter(const DeviceCallContext& call, const ReduceScatterArgs& args) = 0;
  virtual void allgather(const DeviceCallContext& call, const AllgatherArgs& args) = 0;
  virtual void broadcast(const DeviceCallContext& call, const BroadcastArgs& args) = 0;
  virtual void reduce(const DeviceCallContext& call, const ReduceArgs& args) = 0;
  virtual void gather(const DeviceCallContext& call, const GatherArgs& args) = 0;
  virtual void scatter(const DeviceCallContext& call, const ScatterArgs& args) = 0;
  virtual void allToAll(const DeviceCallContext& call, const AllToAllArgs& args) = 0;
  // A barrier's device part; the runtime synchronizes its completion (the host waits).
  virtual void barrier(const DeviceCallContext& call) = 0;
  virtual void send(
      const DeviceCallContext& call, const void* data, size_t bytes, int peer, int tag) = 0;
  virtual void recv(const DeviceCallContext& call, void* data, size_t bytes, int peer, int tag) = 0;

  // Device-to-device copy on the call's stream (staging fused lists).
  virtual void copy(void* to, const void* from, size_t bytes) = 0;
  // `rows` runs of `rowBytes`, the i-th from from + i * fromPitch to to + i * toPitch, on the
  // call's stream (interleaving blocks along an axis; see runtime/tensor_layout.h).
  virtual void copyRows(void* to,
                        size_t toPitch,
                        const void* from,
                        size_t fromPitch,
                        size_t rowBytes,
                        size_t rows) = 0;
  // Device memory of at least `bytes`, owned by the backend, for staging: valid until the next
  // scratch() call; work already enqueued on it is ordered before any later reuse (the calls are
  // ordered one after another, whichever streams they run on).
  virtual void* scratch(size_t bytes) = 0;
  virtual std::shared_ptr<DeviceCompletion> recordEnd() = 0;
  // After a call failed part way (a failure latched while its body enqueued, say): a completion
  // recorded on the call's stream whatever the failure, so that the buffers of kernels it may
  // have launched stay in use until deviceStopped(); its isCompleted() raises the failure. Null
  // when none can be recorded. Never throws.
  virtual std::shared_ptr<DeviceCompletion> recordStop() noexcept = 0;

  // Collective over this backend's members, in call order with its collectives (ncclCommSplit):
  // the members passing the same `color` >= 0 form a new device backend on the same device, ranked
  // by `key`, which `options` describes (its rank, size, worldRanks, scope, deadline). A negative
  // color joins none and gets null. Cheaper than a fresh rendezvous: no id is exchanged, and NCCL
  // may share the parent's resources. A failure fails this backend too.
  virtual std::unique_ptr<Backend> split(int color, int key, const BackendOptions& options) = 0;
};

}  // namespace chorus::backend
