// CommunicatorState: what a Communicator is made of — its placement, its backend, the queue that
// runs its operations in call order, the collective sequence counter that stamps fingerprints
// (Note [Collective fingerprint]), its timeout, and the first failure, after which it is aborted.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_backend.h"
#include "backend/options.h"
#include "chorus/communicator.h"
#include "chorus/tensor.h"
#include "chorus/work.h"
#include "core/function_ref.h"
#include "core/rank_names.h"
#include "core/thread_annotations.h"
#include "core/workspace.h"
#include "runtime/operation_queue.h"
#include "store/store.h"
#include "trace/recorder.h"

namespace chorus::detail {

// Where this rank sits in the communicator.
struct CommunicatorInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int worldRank = 0;
  int worldSize = 1;
  int groupId = 0;
  int groupSize = 1;
  std::vector<int> worldRanks;       // member i's world rank
  std::vector<std::string> nodeIds;  // member i's node
  int rootRank() const { return worldRanks.empty() ? 0 : worldRanks.front(); }
};

// What creating a sub-communicator needs.
struct CommunicatorResources {
  std::shared_ptr<store::Store> store;  // the job's store, unscoped (null for a one-rank job)
  std::string token;
  std::string bindHost = "127.0.0.1";
  std::string backendName = "auto";
  std::string scope;  // unique name of this communicator, identical on its ranks
  std::string interNodeTransport = "tcp";  // BackendOptions::interNodeTransport
};

// The options of a backend for the communicator `info` describes: its members, their nodes, the
// job's store scoped to "comm/<scope>/<role>" (none for one rank), and a deadline `timeout` away.
// The name is the resources' (the device backend overrides it).
backend::BackendOptions backendOptionsOf(const CommunicatorInfo& info,
                                         const CommunicatorResources& resources,
                                         std::chrono::milliseconds timeout,
                                         const std::string& role);

// Note [Device fingerprint check]
// NCCL compares nothing: ranks that call different collectives, or the same one with different
// counts, hang or produce garbage. So every collective on CUDA tensors is also checked on the
// host: its fingerprint (Note [Collective fingerprint]) joins the host operation queue as a
// barrier on the communicator's host backend (shm, tcp, mpi: the side channel), stamped with the
// device call's fingerprint, which every host backend compares across ranks. The check runs on
// the worker thread while the GPU works, so neither the caller nor the GPU stream waits for it.
// It ends in a MismatchError naming the field when the calls differ, a TimeoutError naming the
// ranks that never called, or a PeerError naming a dead one; any of them fails the communicator,
// which aborts the NCCL communicator, so a mismatched kernel ends instead of hanging, and every
// later call and wait raises the error. The check is queued before the device work: NCCL may
// wait inside the enqueue (connecting peers at a first collective) for a rank that never calls,
// and the check's failure then aborts that wait, with the check's error, which names the rank
// (the enqueue's own deadline is then twice CHORUS_TIMEOUT). Whatever else fails after the
// check was queued fails the communicator, so that the peers' checks, which pass, never leave
// their GPUs waiting for a collective this rank did not launch. A blocking call returns before its
// check finished: a mismatch is raised by a later call, by synchronize(), or by wait() of a later
// Work. Point-to-point calls are not checked (no collective to join), nor are communicators of one
// rank or with no host backend (backend 'nccl' named on its own). Cost: one host barrier per device
// collective, off the caller's thread.

// Note [Point-to-point overlap]
// torch.distributed, MPI and NCCL let a program post a receive and then the send its peer waits
// for (irecv(left); isend(right); wait for both): the two must progress together. A
// communicator's operations run one at a time, in call order, so a receive posted first would
// hold the queue until its message came, and a ring of such receives would wait forever. So when
// the backend posts point-to-point (Backend::postsPointToPoint: tcp, shm, hierarchical, mpi,
// mpi_algorithms), a send or recv runs differently: the worker thread posts it, then, while any
// transfer is in flight, takes the point-to-point operations queued right behind it, posts them
// too, and waits for any of them to finish (Backend::waitSome). Pushing a transfer to the queue
// interrupts that wait, so a newly issued one joins at once. Each Work completes when its own
// transfer does. A collective queued behind them runs at once, while they are in flight, where the
// backend keeps them moving meanwhile, and otherwise once every earlier transfer is done; a
// transfer issued while a collective runs starts during it (Note [Collectives and transfers
// together], communicator_transfers.cc); transfers of one (peer, tag) match in call order; each
// has its own deadline, a failure fails the communicator as any other. Only the worker runs a
// batch of transfers (a waiter could not leave the others in flight when its own is done). A
// blocking call under BlockingCalls that finds the queue idle still runs whole on the calling
// thread: nothing can join it from that thread.

class DeviceWatchdog;

// A reference to an operation's body for the time of one call: no copy, no allocation.
using BodyRef = FunctionRef<void(const backend::CallContext&)>;

class CommunicatorState : public std::enable_shared_from_this<CommunicatorState> {
 public:
  using Body = std::function<void(const backend::CallContext&)>;
  using DeviceBody =
      std::function<void(backend::DeviceBackend&, const backend::DeviceCallContext&)>;

  CommunicatorState(CommunicatorInfo info,
                    CommunicatorResources resources,
                    std::unique_ptr<backend::Backend> backend,
                    std::chrono::milliseconds timeout);
  ~CommunicatorState();

  const CommunicatorInfo& info() const { return info_; }
  const CommunicatorResources& resources() const { return resources_; }
  backend::Backend& backend() { return *backend_; }

  // Queues `body` after every earlier operation. Collectives get the next sequence number in
  // their fingerprint; point-to-point keeps sequence 0. The body runs on the worker thread with a
  // deadline of now + timeout(); its exception fails the Work and aborts the communicator. The
  // body runs on the worker thread, or on the thread that waits for the Work (runIfNext).
  //
  // Under BlockingCalls, a call that finds the queue idle runs here and now on the calling thread
  // (runHereIfIdle), with `body` referenced, not copied: a warmed blocking call allocates nothing
  // (its Work comes from a pool).
  template <typename F>
  std::shared_ptr<Work> submit(Fingerprint fingerprint, F&& body) {
    if (BlockingCalls::active()) {
      if (std::shared_ptr<Work> work = runHereIfIdle(fingerprint, BodyRef(body)))
        return work;
    }
    return enqueue(fingerprint, Body(std::forward<F>(body)), /*number=*/true);
  }

  // A collective on CUDA tensors of device `device` (Note [Device call order]): on the calling
  // thread, after the communicator's checks, `body` enqueues on the device backend (made at the
  // first such call, collectively, with its watchdog), then the Work is a DeviceWork that the
  // watchdog (device_watchdog.h) watches and that carries the call's host check (Note [Device
  // fingerprint check]). A failure completes the Work with the error and fails the communicator,
  // as submit() does, except that refusals before anything is sent throw at the call and leave the
  // communicator working: a build or process without a GPU and arguments the backend cannot serve
  // (UnsupportedError), a tensor on another GPU (InvalidArgumentError). The device backend checks
  // its arguments before its NCCL call. Device calls do not wait for host operations still queued:
  // they touch other memory. Host and device calls issued from several threads at once are
  // numbered in an order the program does not control, as host calls are.
  std::shared_ptr<Work> submitDevice(Fingerprint fingerprint, int device, const DeviceBody& body);

  // A send (`isSend`) or receive of host tensor `tensor` with `peer` (a rank of this
  // communicator, not this one) and `tag` (Note [Point-to-point overlap]).
  struct PointToPointCall {
    bool isSend = false;
    Tensor tensor;
    int peer = -1;
    int tag = 0;
  };
  std::shared_ptr<Work> submitPointToPoint(const Fingerprint& fingerprint, PointToPointCall call);

  // Collective over this communicator (split and rank_list call it on every rank, in call
  // order): when it has a device backend, splits it (DeviceBackend::split) for the group of
  // `members` (ranks of this communicator, in the group's order) that this rank joins at position
  // `key`; color < 0 joins none. Null when there is no device backend yet (the group then makes
  // its own at its first CUDA collective) or for color < 0.
  std::unique_ptr<backend::Backend> splitDevice(int color,
                                                int key,
                                                const std::vector<int>& members,
                                                const std::string& scope);
  // Takes `device` (from a parent's splitDevice) as this communicator's device backend.
  void adoptDeviceBackend(std::unique_ptr<backend::Backend> device);

  void setTimeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;
  // Fails the communicator with a PeerError quoting `reason` and naming `failedRank` (a world
  // rank), or this rank when it is -1.
  void abort(const std::string& reason, int failedRank = -1) noexcept;
  // Counter of split() calls, identical on every rank.
  uint64_t nextSplitId();
  // Counter of subgroup() calls with this name (its tag and members), identical on its members.
  uint64_t nextSubgroupCount(const std::string& name);
  // Staging memory for the front end (packing, widening); used by the running operation only.
  Workspace& staging() { return staging_; }
  OperationQueue& queue() { return queue_; }

 private:
  // Queues `body` as an operation; numbers collectives first when `number` is set.
  std::shared_ptr<Work> enqueue(Fingerprint fingerprint, Body body, bool number);
  // When nothing is queued or running: numbers the collective, runs `body` on this thread and
  // returns its completed Work. Otherwise null, and nothing is done.
  std::shared_ptr<Work> runHereIfIdle(Fingerprint fingerprint, BodyRef body);
  // How the operation that execute() runs holds the queue: a claim (claimIfIdle), as the queue's
  // running operation, or inside a batch of transfers, which holds it (Note [Collectives and
  // transfers together]). execute() releases the first two.
  enum class Hold { kClaimed, kRunning, kAmidTransfers };
  // Runs `body` and finishes `work`, releasing the queue as its hold says. The first form runs a
  // queued operation; the second takes the failure, timeout and hold its caller read under mutex_.
  void execute(Work& work, const Fingerprint& fingerprint, BodyRef body);
  void execute(Work& work,
               const Fingerprint& fingerprint,
               BodyRef body,
               std::exception_ptr earlier,
               std::chrono::milliseconds timeout,
               Hold hold);
  // The transfers of Note [Point-to-point overlap] and Note [Collectives and transfers together]
  // (communicator_transfers.cc).
  struct PendingTransfer;
  // The transfers that the running operation holds: a batch on the worker, or those a collective
  // started while it waited.
  struct TransferBatch {
    std::vector<std::shared_ptr<PendingTransfer>> active;    // posted, in flight
    std::vector<std::shared_ptr<PendingTransfer>> joining;   // taken from the queue, not posted
    std::vector<std::shared_ptr<PendingTransfer>> finished;  // done; Works completed at the end
    bool empty() const { return active.empty() && joining.empty(); }
  };
  // `error` with, for the timeout of a blocking transfer run whole while a collective waits behind
  // it, what that means.
  std::exception_ptr explainQueuedCollective(std::exception_ptr error);
  // Runs `first` and every transfer that joins it, on the worker.
  void runTransfers(std::shared_ptr<PendingTransfer> first);
  // Runs `batch` on the worker until its transfers are done, taking those queued behind it and
  // the collectives that follow them (runAmidTransfers); then releases the queue and completes
  // their Works.
  void continueTransfers(TransferBatch& batch);
  // Runs `collective` (taken from the queue) while `batch`'s transfers are in flight; those that
  // finish meanwhile complete their Works at once (their listeners).
  void runAmidTransfers(const OperationQueue::Operation& collective, TransferBatch& batch);
  // Runs an operation's body. A collective on a backend that moves transfers gets a whileWaiting
  // (whileCollectiveWaits) and, unless it runs amid a batch (`hold`), hands the transfers it
  // started to the worker when it ends (handOverTransfers).
  void runWithTransfers(BodyRef body, backend::CallContext call, Hold hold);
  // What every wait of such a collective calls: posts the transfers queued behind it and polls
  // the posted ones; returns whether any are in flight.
  bool whileCollectiveWaits();
  // Queues the transfers that the collective started (collectiveTransfers_) to run next, as a
  // batch on the worker; nothing when there are none.
  void handOverTransfers();
  // Records the start of a send or recv in the flight recorder (Note [Flight recorder]).
  trace::Ticket recordTransfer(const Fingerprint& fingerprint, const PointToPointCall& call) const;
  // Posts `transfer` with a deadline `timeout` from now.
  void startTransfer(PendingTransfer& transfer, std::chrono::milliseconds timeout);
  // Latches `error` (in this communicator's context) as its failure unless one is, and aborts
  // the device backend with it (the host backend failed itself); returns the error.
  std::exception_ptr latchFailure(std::exception_ptr error) noexcept;
  // Latches `error` as the communicator's failure (unless one is latched) and aborts its
  // backends, host and device, with it: peers hear of it, and NCCL's kernels end. Any thread.
  void failWith(std::exception_ptr error) noexcept;
  // The host check of a device collective (Note [Device fingerprint check]), or null.
  std::shared_ptr<Work> checkOnHost(const Fingerprint& fingerprint);
  // The device backend for CUDA device `device`, made at the first call (see submitDevice).
  backend::DeviceBackend& deviceBackend(int device);
  // Latches `error` as the communicator's failure (unless it already failed); a DeviceWork failed
  // with the communicator's first failure.
  // `stopped`: where the failed call's launched work ends on the stream (its buffers stay in use
  // until the device has stopped it), or null when nothing was launched.
  std::shared_ptr<Work> failDevice(const Fingerprint& fingerprint,
                                   std::exception_ptr error,
                                   std::shared_ptr<backend::DeviceCompletion> stopped = nullptr);

  // The error of an operation or an abort, saying which group it arose in (group_context.h).
  std::exception_ptr inContext(std::exception_ptr error) const noexcept;

  const CommunicatorInfo info_;
  const CommunicatorResources resources_;
  const RankNames names_;           // Note [One rank numbering]
  const std::string groupContext_;  // empty for the world
  std::unique_ptr<backend::Backend> backend_;
  const uint32_t traceGroup_;  // this communicator in the flight recorder (trace/recorder.h)
  // The backend of CUDA tensors (nccl), made at the first call on them; null before. Device calls
  // hold deviceMutex_ from numbering to enqueuing, so enqueue order is call order; abort() reads
  // the published pointer without it.
  std::mutex deviceMutex_;
  std::unique_ptr<backend::Backend> deviceBackend_;
  std::atomic<backend::Backend*> publishedDeviceBackend_{nullptr};
  std::unique_ptr<DeviceWatchdog> watchdog_;  // made with the device backend
  Workspace staging_;
  // The transfers of the running operation (a batch, or a collective's), or null: those queued
  // behind it join there. Used by whichever thread holds the queue.
  TransferBatch* batch_ = nullptr;
  TransferBatch collectiveTransfers_;  // a collective's, outside a batch (runWithTransfers)
  bool inWhileWaiting_ = false;        // whileCollectiveWaits is running (queue holder only)
  // A collective whose waits take transfers runs: a pushed transfer wakes them.
  std::atomic<bool> collectiveTakesTransfers_{false};
  // Set while that batch may wait: a pushed transfer then interrupts the wait.
  std::atomic<bool> transfersWaiting_{false};

  mutable std::mutex mutex_;
  std::chrono::milliseconds timeout_ CHORUS_GUARDED_BY(mutex_);
  uint64_t collectiveSequence_ CHORUS_GUARDED_BY(mutex_) = 0;
  uint64_t splitCount_ CHORUS_GUARDED_BY(mutex_) = 0;
  std::map<std::string, uint64_t> subgroupCounts_ CHORUS_GUARDED_BY(mutex_);
  std::exception_ptr failure_ CHORUS_GUARDED_BY(mutex_);
  bool amidTransfers_ CHORUS_GUARDED_BY(mutex_) = false;  // runAmidTransfers is running one
  OperationQueue queue_;
};

}  // namespace chorus::detail
