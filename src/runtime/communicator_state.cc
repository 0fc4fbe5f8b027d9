#include "runtime/communicator_state.h"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <optional>
#include <utility>

#include "backend/factory.h"
#include "chorus/communicator.h"
#include "chorus/error.h"
#include "chorus/stream.h"
#include "core/check.h"
#include "core/error_codec.h"
#include "core/stall_watch.h"
#include "core/thread_cached_allocator.h"
#include "runtime/arrival_census.h"
#include "runtime/device_watchdog.h"
#include "runtime/device_work.h"
#include "runtime/group_context.h"
#include "store/prefix_store.h"
#include "trace/flight_record.h"

namespace chorus::detail {
namespace {

// A Work whose waiter runs the operation itself when it is next in line (see OperationQueue).
class QueuedWork : public Work {
 public:
  QueuedWork(int rank, const Fingerprint& fingerprint, std::weak_ptr<CommunicatorState> state)
      : rank_(rank), fingerprint_(fingerprint), state_(std::move(state)) {}
  void setOperation(const OperationQueue::Operation& operation) { operation_ = operation; }

 protected:
  void runIfNext() noexcept override {
    if (isCompleted())
      return;
    auto state = state_.lock();  // keeps the communicator alive while its operation runs here
    auto operation = operation_.lock();
    if (state && operation)
      state->queue().runIfNext(operation);
  }
  std::string describe() const override {
    return concat("rank ", rank_, ": ", fingerprint_.describe());
  }

 private:
  const int rank_;
  const Fingerprint fingerprint_;
  std::weak_ptr<CommunicatorState> state_;
  // Weak: the operation holds the Work, and is dropped once it has run.
  std::weak_ptr<std::function<void()>> operation_;
};

std::shared_ptr<QueuedWork> makeWork(int rank,
                                     const Fingerprint& fingerprint,
                                     std::weak_ptr<CommunicatorState> state) {
  // Per-thread cached memory: a warmed call allocates none.
  return std::allocate_shared<QueuedWork>(ThreadCachedAllocator<QueuedWork>(), rank, fingerprint,
                                          std::move(state));
}

// "group [0, 1, 2, 3] (shm)", "group [0..63] (tcp)": the communicator in flight records.
std::string describeGroup(const std::vector<int>& worldRanks, const std::string& backend) {
  std::string members;
  bool consecutive = worldRanks.size() > 4;
  for (size_t i = 1; i < worldRanks.size() && consecutive; ++i)
    consecutive = worldRanks[i] == worldRanks[i - 1] + 1;
  if (consecutive) {
    members = concat(worldRanks.front(), "..", worldRanks.back());
  } else {
    for (size_t i = 0; i < worldRanks.size(); ++i)
      members += (i > 0 ? ", " : "") + std::to_string(worldRanks[i]);
  }
  return concat("group [", members, "] (", backend, ")");
}

uint64_t bytesOf(const Fingerprint& fingerprint) {
  if (fingerprint.dataType == Fingerprint::kNoDataType)
    return fingerprint.count;
  return fingerprint.count * dataTypeSize(static_cast<DataType>(fingerprint.dataType));
}

int64_t nanoseconds(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

std::string whatOf(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown error";
  }
}

}  // namespace

backend::BackendOptions backendOptionsOf(const CommunicatorInfo& info,
                                         const CommunicatorResources& resources,
                                         std::chrono::milliseconds timeout,
                                         const std::string& role) {
  backend::BackendOptions options;
  options.name = resources.backendName;
  options.rank = info.rank;
  options.size = info.size;
  options.worldRanks = info.worldRanks;
  options.oneNode = std::all_of(info.nodeIds.begin(), info.nodeIds.end(),
                                [&](const std::string& id) { return id == info.nodeIds.front(); });
  options.nodeIds = info.nodeIds;
  if (info.size > 1 && resources.store != nullptr) {
    options.store = std::make_shared<store::PrefixStore>("comm/" + resources.scope + "/" + role,
                                                         resources.store);
  }
  options.token = resources.token;
  options.scope = resources.scope;
  options.bindHost = resources.bindHost;
  options.interNodeTransport = resources.interNodeTransport;
  options.deadline = Deadline::after(timeout);
  return options;
}

CommunicatorState::CommunicatorState(CommunicatorInfo info,
                                     CommunicatorResources resources,
                                     std::unique_ptr<backend::Backend> backend,
                                     std::chrono::milliseconds timeout)
    : info_(std::move(info)),
      resources_(std::move(resources)),
      names_(info_.worldRanks),
      groupContext_(groupContext(info_.worldRanks)),
      backend_(std::move(backend)),
      traceGroup_(trace::registerGroup(describeGroup(info_.worldRanks, backend_->name()))),
      timeout_(timeout) {
  // A stall warning writes the flight record too (Note [Flight recorder]).
  static std::once_flag listening;
  std::call_once(listening, [] {
    stall::setStallListener([](const std::string& warning) {
      try {
        trace::dumpFlightRecord("stall warning: " + warning);
      } catch (...) {
      }
    });
  });
}

std::exception_ptr CommunicatorState::inContext(std::exception_ptr error) const noexcept {
  return groupContext_.empty() ? error : withPrefix(error, groupContext_);
}

CommunicatorState::~CommunicatorState() {
  watchdog_.reset();  // stops watching before anything it would abort goes away
  // Pending operations finish first, then peers are told goodbye.
  queue_.shutdown();
  backend_->close();
  if (deviceBackend_)
    deviceBackend_->close();
}

std::shared_ptr<Work> CommunicatorState::enqueue(Fingerprint fingerprint, Body body, bool number) {
  std::shared_ptr<QueuedWork> work;
  {
    // Numbering and queueing happen under one lock, so the queue's order is the numbers' order.
    std::lock_guard lock(mutex_);
    if (number && fingerprint.collective != Collective::kPointToPoint) {
      fingerprint.sequence = ++collectiveSequence_;
    }
    work = makeWork(info_.worldRank, fingerprint, weak_from_this());
    auto operation =
        std::make_shared<std::function<void()>>([this, work, fingerprint, body = std::move(body)] {
          execute(*work, fingerprint, BodyRef(body));
        });
    work->setOperation(operation);
    queue_.push(std::move(operation), /*pointToPoint=*/false,
                /*collective=*/fingerprint.collective != Collective::kPointToPoint);
  }
  // A batch of transfers that waits takes a collective behind it (Note [A collective amid
  // transfers]): wake it, as submitPointToPoint does for a transfer.
  if (transfersWaiting_.load(std::memory_order_seq_cst) && backend_->collectivesMoveTransfers())
    backend_->interruptWait();
  return work;
}

std::shared_ptr<Work> CommunicatorState::runHereIfIdle(Fingerprint fingerprint, BodyRef body) {
  std::shared_ptr<QueuedWork> work;
  std::exception_ptr earlier;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(mutex_);  // numbering and claiming together, as in enqueue
    if (!queue_.claimIfIdle())
      return nullptr;
    if (fingerprint.collective != Collective::kPointToPoint)
      fingerprint.sequence = ++collectiveSequence_;
    // No link to this state: the Work is complete before anyone sees it, so no waiter will ever
    // run it (QueuedWork::runIfNext), and its weak count costs two atomics per call.
    work = makeWork(info_.worldRank, fingerprint, {});
    earlier = failure_;
    timeout = timeout_;
  }
  execute(*work, fingerprint, body, earlier, timeout, Hold::kClaimed);  // releases the queue
  return work;
}

namespace {
thread_local int blockingCallsDepth = 0;

std::string describeFingerprint(const void* fingerprint) {
  return static_cast<const Fingerprint*>(fingerprint)->describe();
}
}  // namespace

void CommunicatorState::execute(Work& work, const Fingerprint& fingerprint, BodyRef body) {
  std::exception_ptr earlier;
  std::chrono::milliseconds timeout;
  Hold hold;
  {
    std::lock_guard lock(mutex_);
    earlier = failure_;
    timeout = timeout_;
    hold = amidTransfers_ ? Hold::kAmidTransfers : Hold::kRunning;
  }
  execute(work, fingerprint, body, earlier, timeout, hold);
}

void CommunicatorState::execute(Work& work,
                                const Fingerprint& fingerprint,
                                BodyRef body,
                                std::exception_ptr earlier,
                                std::chrono::milliseconds timeout,
                                Hold hold) {
  // The queue is free before anyone learns the work is done (see releaseRunning).
  auto release = [&] {
    if (hold == Hold::kClaimed)
      queue_.releaseClaim();
    else if (hold == Hold::kRunning)
      queue_.releaseRunning();
  };
  if (earlier) {
    release();
    work.finish(earlier);
    return;
  }
  std::exception_ptr error;
  trace::Ticket ticket;
  try {
    const Clock::time_point startedAt = coarseNow();  // its deadline is seconds away
    // The census (Note [Stall inspector]): in the store, else the backend's own, if it has one.
    std::optional<StoreCensus> storeCensus;
    stall::Census* census = nullptr;
    if (info_.size > 1 && fingerprint.sequence > 0) {
      if (resources_.store) {
        storeCensus.emplace(*resources_.store, resources_.scope, info_.rank, info_.size, names_,
                            fingerprint);
        census = &*storeCensus;
      } else {
        census = backend_->census(fingerprint.sequence);
      }
    }
    stall::OperationScope scope(info_.worldRank, startedAt, timeout, &describeFingerprint,
                                &fingerprint, census);
    // Send and recv record themselves, with their peer (submitPointToPoint).
    if (fingerprint.collective != Collective::kPointToPoint)
      ticket = trace::beginOperation(traceGroup_, fingerprint, bytesOf(fingerprint),
                                     nanoseconds(startedAt));
    body(backend::CallContext{fingerprint, Deadline(startedAt + timeout), &ticket,
                              /*transfersInFlight=*/hold == Hold::kAmidTransfers});
  } catch (...) {
    error = latchFailure(std::current_exception());
  }
  trace::end(ticket, error != nullptr);
  release();
  work.finish(error);
}

std::exception_ptr CommunicatorState::latchFailure(std::exception_ptr error) noexcept {
  error = inContext(error);
  {
    std::lock_guard lock(mutex_);
    if (!failure_)
      failure_ = error;
  }
  trace::dumpFlightRecordOnFailure(whatOf(error));  // Note [Flight recorder]
  // The host backend already failed itself; the device backend must stop too (a failed host
  // check means its NCCL call may never end).
  if (backend::Backend* device = publishedDeviceBackend_.load())
    device->abort(error);
  return error;
}

struct CommunicatorState::PendingTransfer : backend::TransferListener {
  std::shared_ptr<QueuedWork> work;
  Fingerprint fingerprint;
  PointToPointCall call;
  backend::Transfer transfer;
  Deadline deadline = Deadline::never();
  trace::Ticket ticket;  // from its start
  bool finished = false;
  // Ends its record and completes its Work (which learns the sender of a recv from any rank), the
  // first time only: one that finished amid a collective stays in the batch until a wait marks it.
  void finish(std::exception_ptr error) noexcept {
    if (std::exchange(finished, true))
      return;
    if (!error && call.peer == Communicator::kAnySource)
      work->sourceRank_ = transfer.request.peer;
    trace::end(ticket, error != nullptr);
    work->finish(error);
  }
  // Its bytes moved while a collective ran (Note [A collective amid transfers]).
  void completed(transport::Request& /*request*/) noexcept override { finish(nullptr); }
};

trace::Ticket CommunicatorState::recordTransfer(const Fingerprint& fingerprint,
                                                const PointToPointCall& call) const {
  const int64_t peer = call.peer == Communicator::kAnySource ? trace::kAnyRank
                       : info_.worldRanks.empty()            ? call.peer
                                                             : info_.worldRanks[call.peer];
  return trace::beginOperation(traceGroup_, fingerprint, call.tensor.nbytes(),
                               nanoseconds(coarseNow()),
                               peer | (call.isSend ? trace::kSendBit : 0));
}

std::shared_ptr<Work> CommunicatorState::submitPointToPoint(const Fingerprint& fingerprint,
                                                            PointToPointCall call) {
  const bool anySource = call.peer == Communicator::kAnySource;
  if (anySource && !backend_->postsPointToPoint()) {
    throw UnsupportedError(concat("rank ", info_.worldRank, " (this process): recv from any rank ",
                                  "on backend ", backend_->name(), ", which does not offer it"));
  }
  // A recv from any rank is always posted: its sender is known only from its transfer.
  if (!anySource && (!backend_->postsPointToPoint() || BlockingCalls::active())) {
    const int source = call.isSend ? -1 : call.peer;
    auto whole = [this, call](const backend::CallContext& context) {
      const trace::Ticket ticket = recordTransfer(context.fingerprint, call);
      try {
        if (call.isSend)
          backend_->send(context, call.tensor.data(), call.tensor.nbytes(), call.peer, call.tag);
        else
          backend_->recv(context, call.tensor.data(), call.tensor.nbytes(), call.peer, call.tag);
      } catch (...) {
        // Latched (and the flight record written) while this transfer still runs, so the record
        // says the rank stood in it; execute() latches the same failure again, which is a no-op.
        std::exception_ptr error = explainQueuedCollective(std::current_exception());
        latchFailure(error);
        trace::end(ticket, /*failed=*/true);
        std::rethrow_exception(error);
      }
      trace::end(ticket, /*failed=*/false);
    };
    std::shared_ptr<Work> work = backend_->postsPointToPoint()
                                     ? runHereIfIdle(fingerprint, BodyRef(whole))
                                     : submit(fingerprint, whole);
    if (work != nullptr) {
      work->sourceRank_ = source;  // not yet handed out; finish() never reads it
      return work;
    }
  }
  auto pending = std::make_shared<PendingTransfer>();
  pending->work = makeWork(info_.worldRank, fingerprint, weak_from_this());
  pending->fingerprint = fingerprint;
  pending->call = std::move(call);
  if (!pending->call.isSend && !anySource)
    pending->work->sourceRank_ = pending->call.peer;
  std::shared_ptr<Work> work = pending->work;
  auto operation = std::make_shared<std::function<void()>>([this, pending] {
    if (joining_ != nullptr)
      joining_->push_back(pending);  // taken by the running batch (takeNextPointToPoint)
    else
      runTransfers(pending);
  });
  pending->work->setOperation(operation);
  {
    std::lock_guard lock(mutex_);  // in order with the collectives enqueue() numbers
    queue_.push(std::move(operation), /*pointToPoint=*/true);
  }
  if (transfersWaiting_.load(std::memory_order_seq_cst))
    backend_->interruptWait();
  return work;
}

void CommunicatorState::startTransfer(PendingTransfer& transfer,
                                      std::chrono::milliseconds timeout) {
  transfer.deadline = Deadline(coarseNow() + timeout);
  transfer.ticket = recordTransfer(transfer.fingerprint, transfer.call);
  const backend::CallContext context{transfer.fingerprint, transfer.deadline};
  const PointToPointCall& call = transfer.call;
  if (call.isSend) {
    backend_->postSend(context, call.tensor.data(), call.tensor.nbytes(), call.peer, call.tag,
                       transfer.transfer);
  } else {
    const int peer = call.peer == Communicator::kAnySource ? transport::kAnyPeer : call.peer;
    backend_->postRecv(context, call.tensor.data(), call.tensor.nbytes(), peer, call.tag,
                       transfer.transfer);
  }
}

// Note [A collective amid transfers]
// MPI lets a collective start while sends and receives issued before it are still in flight, and
// programs rely on it: a rank posts a receive, enters a barrier, and its peer sends only after the
// barrier (irecv; barrier; send on the peer); or a rank sends asynchronously before a collective
// that its receiver enters before its receive. So on a backend whose collectives keep posted
// transfers moving (Backend::collectivesMoveTransfers: every backend that posts them) the batch of
// transfers that holds the queue (Note [Point-to-point overlap]) also takes a collective queued
// right behind it and runs it at once, on the worker, with its transfers still posted; the
// collective's CallContext says so (transfersInFlight). Over a transport, the collective's waits
// move every posted request; the shm backend's group waits poll its fallback's transfers (at least
// every millisecond while they sleep), as the hierarchical backend's node and leaders steps poll
// its flat step's (CallContext::pollElsewhere); MPI's progress engine moves its own. A transfer
// that finishes meanwhile completes its Work at once, not when the collective ends: each has a
// listener (Request::listener) for the collective's time, which the wait pass or poll that finds it
// done tells (the mpi backend's test loop tests the transfers each pass), so a program may wait for
// it while the collective runs and go on to what the collective's peers wait for. After the
// collective a wait that returns at once marks what is done, and the batch goes on: the transfers
// queued behind the collective join, and another collective may run. Each transfer keeps its own
// deadline and the collective its own; once a transfer's has passed the batch takes no more
// collectives, and its wait fails it. A failure of either fails the communicator, and both. What
// remains: the operations queued behind a collective wait for it (a transfer issued after an
// async collective is posted only once the collective is done), and the mpi backend's fallback
// (half types) does not tell listeners until it is done. A blocking send or recv that runs whole
// on its caller's thread (BlockingCalls, idle queue) still holds a collective that another thread
// issues meanwhile; its timeout says so (explainQueuedCollective), and what to do.
std::exception_ptr CommunicatorState::explainQueuedCollective(std::exception_ptr error) {
  if (!queue_.collectiveQueued())
    return error;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& timeout) {
    return std::make_exception_ptr(TimeoutError(
        concat(timeout.what(), ". This rank's next collective on this communicator, issued ",
               "from another thread while this blocking transfer ran, waits for it: if the peer ",
               "waits in that collective before its side of the transfer, neither goes on. Issue ",
               "the collective once the transfer has returned, or the peer's side before its ",
               "collective (Note [A collective amid transfers])"),
        timeout.missingRanks()));
  } catch (...) {
    return error;
  }
}

void CommunicatorState::runAmidTransfers(
    const OperationQueue::Operation& collective,
    const std::vector<std::shared_ptr<PendingTransfer>>& active) {
  for (const auto& transfer : active) transfer->transfer.request.listener = transfer.get();
  {
    std::lock_guard lock(mutex_);
    amidTransfers_ = true;
  }
  // Whatever happens, later operations run as before: a listener not yet told is taken back.
  auto after = [&] {
    {
      std::lock_guard lock(mutex_);
      amidTransfers_ = false;
    }
    for (const auto& transfer : active) transfer->transfer.request.listener = nullptr;
  };
  try {
    (*collective)();  // execute(), which sees amidTransfers_: it leaves the queue held
  } catch (...) {
    after();
    throw;
  }
  after();
}

void CommunicatorState::runTransfers(std::shared_ptr<PendingTransfer> first) {
  std::vector<std::shared_ptr<PendingTransfer>> active;                     // posted, in flight
  std::vector<std::shared_ptr<PendingTransfer>> joining{std::move(first)};  // not yet posted
  std::vector<std::shared_ptr<PendingTransfer>> finished;
  std::vector<backend::Transfer*> waiting;
  std::exception_ptr error;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(mutex_);
    error = failure_;
    timeout = timeout_;
  }
  if (!error) {
    joining_ = &joining;
    try {
      stall::OperationScope scope(info_.worldRank, coarseNow(), timeout, &describeFingerprint,
                                  &joining.front()->fingerprint);
      while (true) {
        for (auto& transfer : joining) {
          startTransfer(*transfer, timeout);
          active.push_back(transfer);
        }
        joining.clear();
        auto done = std::stable_partition(active.begin(), active.end(),
                                          [](const auto& t) { return !t->transfer.done(); });
        finished.assign(std::make_move_iterator(done), std::make_move_iterator(active.end()));
        active.erase(done, active.end());
        if (active.empty())
          break;  // the last ones finish once the queue is free
        for (auto& transfer : finished) transfer->finish(nullptr);
        // Those queued behind join now; any pushed from here on interrupts the wait.
        transfersWaiting_.store(true, std::memory_order_seq_cst);
        while (OperationQueue::Operation next = queue_.takeNextPointToPoint()) (*next)();
        if (!joining.empty())
          continue;
        waiting.clear();
        Deadline deadline = Deadline::never();
        for (auto& transfer : active) {
          waiting.push_back(&transfer->transfer);
          deadline = Deadline::earliest(deadline, transfer->deadline);
        }
        // A transfer past its deadline takes no more collectives along: the wait below fails it.
        if (backend_->collectivesMoveTransfers() && !deadline.expired()) {
          if (OperationQueue::Operation collective = queue_.takeNextCollective()) {
            transfersWaiting_.store(false, std::memory_order_seq_cst);
            runAmidTransfers(collective, active);
            backend_->interruptWait();  // the wait below only marks what is done, at once
          }
        }
        backend_->waitSome(waiting, deadline);
        transfersWaiting_.store(false, std::memory_order_seq_cst);
      }
    } catch (...) {
      error = latchFailure(std::current_exception());
    }
    transfersWaiting_.store(false, std::memory_order_seq_cst);
    joining_ = nullptr;
  }
  queue_.releaseRunning();
  for (auto* list : {&finished, &active, &joining}) {
    for (auto& transfer : *list) transfer->finish(list == &finished ? nullptr : error);
  }
}

namespace {

// Rethrows `error` if it is bad input refused at the call (UnsupportedError, InvalidArgumentError).
void rethrowIfBadInput(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const UnsupportedError&) {
    throw;
  } catch (const InvalidArgumentError&) {
    throw;
  } catch (...) {
  }
}

}  // namespace

std::shared_ptr<Work> CommunicatorState::submitDevice(Fingerprint fingerprint,
                                                      int device,
                                                      const DeviceBody& body) {
  std::lock_guard deviceLock(deviceMutex_);
  {
    std::lock_guard lock(mutex_);
    if (failure_)  // a failed communicator makes no device backend
      return std::make_shared<DeviceWork>(info_.worldRank, fingerprint, nullptr, failure_);
  }
  // A build or a process that cannot run CUDA collectives at all (UnsupportedError), a reduction
  // the device lacks (checkSupported), or a tensor on another GPU than the communicator's
  // (InvalidArgumentError), is refused here like bad input: thrown at the call, before anything
  // is numbered or queued, and the communicator still works.
  backend::DeviceBackend* backend = nullptr;
  try {
    backend = &deviceBackend(device);
    backend->checkSupported(fingerprint);  // a reduction NCCL lacks, say
  } catch (const UnsupportedError&) {
    throw;
  } catch (const InvalidArgumentError&) {
    throw;
  } catch (...) {
    return failDevice(fingerprint, std::current_exception());
  }
  std::exception_ptr earlier;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(mutex_);
    if (fingerprint.collective != Collective::kPointToPoint)
      fingerprint.sequence = ++collectiveSequence_;
    earlier = failure_;
    timeout = timeout_;
  }
  if (earlier)
    return std::make_shared<DeviceWork>(info_.worldRank, fingerprint, nullptr, earlier);
  std::shared_ptr<Work> check;
  std::shared_ptr<backend::DeviceCompletion> stopped;  // where a failed call's launches end
  try {
    const backend::DeviceCallContext call{fingerprint, Deadline::after(timeout)};
    // The host check starts first (on the worker thread; nothing here waits for it): NCCL
    // connects a rank's peers during its first collectives, and its enqueue then waits for a peer
    // that never calls. The check, which names that peer after CHORUS_TIMEOUT, fails the
    // communicator and so aborts the enqueue; the enqueue's own deadline is later, so that it is
    // the check that explains (Note [Device fingerprint check]).
    check = checkOnHost(fingerprint);
    const backend::DeviceCallContext enqueueCall{
        fingerprint, check != nullptr ? Deadline::after(2 * timeout) : call.deadline};
    // A blocking call runs on the caller's stream (Note [Blocking calls on the caller's stream]).
    backend->startAfter(currentStream(), BlockingCalls::active());
    // Recorded from its enqueue to the completion the watchdog sees (Note [Flight recorder]).
    const trace::Ticket ticket =
        trace::beginOperation(traceGroup_, fingerprint, bytesOf(fingerprint),
                              nanoseconds(coarseNow()), trace::kDeviceBit);
    std::shared_ptr<backend::DeviceCompletion> completion;
    try {
      body(*backend, enqueueCall);
      completion = backend->recordEnd();
    } catch (...) {
      trace::end(ticket, /*failed=*/true);
      stopped = backend->recordStop();  // the body may have launched kernels before it failed
      throw;
    }
    // The GPU's CHORUS_TIMEOUT counts from the launch (an enqueue may have waited on NCCL).
    watchdog_->watch(completion, check, fingerprint, Deadline::after(timeout), ticket);
    return std::make_shared<DeviceWork>(info_.worldRank, fingerprint, std::move(completion),
                                        nullptr, std::move(check), resources_.store);
  } catch (...) {
    // Whatever it was (NCCL refusing a pointer on this rank alone, say), the peers' checks have
    // this rank's: they would pass, and their NCCL work wait for this rank's, which never comes.
    // So the communicator fails, and the peers hear of it. Without a check (one rank, point-to-
    // point) bad arguments are still refused at the call, and the communicator still works.
    if (check == nullptr)
      rethrowIfBadInput(std::current_exception());
    return failDevice(fingerprint, std::current_exception(), std::move(stopped));
  }
}

std::shared_ptr<Work> CommunicatorState::checkOnHost(const Fingerprint& fingerprint) {
  if (info_.size == 1 || fingerprint.collective == Collective::kPointToPoint ||
      backend_->deviceBackend() != nullptr) {
    return nullptr;
  }
  return enqueue(
      fingerprint, [this](const backend::CallContext& call) { backend_->barrier(call); },
      /*number=*/false);
}

std::shared_ptr<Work> CommunicatorState::failDevice(
    const Fingerprint& fingerprint,
    std::exception_ptr error,
    std::shared_ptr<backend::DeviceCompletion> stopped) {
  failWith(error);  // peers must hear of it: they are entering the same collective
  // The communicator's first failure, which may be what ended this call and explains it better
  // (a check that named an absent rank, which aborted an enqueue waiting for that rank).
  std::exception_ptr first;
  {
    std::lock_guard lock(mutex_);
    first = failure_;
  }
  return std::make_shared<DeviceWork>(info_.worldRank, fingerprint, std::move(stopped), first);
}

void CommunicatorState::failWith(std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!failure_)
      failure_ = inContext(error);
  }
  trace::dumpFlightRecordOnFailure(whatOf(error));  // Note [Flight recorder]
  backend_->abort(error);
  if (backend::Backend* device = publishedDeviceBackend_.load())
    device->abort(error);
}

backend::DeviceBackend& CommunicatorState::deviceBackend(int device) {
  backend::Backend* made =
      backend_->deviceBackend() != nullptr ? backend_.get() : deviceBackend_.get();
  if (made == nullptr) {
    backend::BackendOptions options = backendOptionsOf(info_, resources_, timeout(), "device");
    options.device = device;
    deviceBackend_ = backend::createDeviceBackend(options);
    publishedDeviceBackend_.store(deviceBackend_.get());
    made = deviceBackend_.get();
  }
  if (!watchdog_) {
    watchdog_ = std::make_unique<DeviceWatchdog>(
        info_.worldRank, resources_.store, [this](std::exception_ptr error) { failWith(error); });
  }
  backend::DeviceBackend& backend = *made->deviceBackend();
  CHORUS_CHECK_ARG(backend.cudaDevice() == device, "rank ", info_.worldRank,
                   " (this process): this communicator runs its CUDA collectives on cuda:",
                   backend.cudaDevice(), ", but this tensor is on cuda:", device,
                   "; a communicator serves one GPU per process (move the tensor, or set the "
                   "device before the first CUDA collective)");
  return backend;
}

std::unique_ptr<backend::Backend> CommunicatorState::splitDevice(int color,
                                                                 int key,
                                                                 const std::vector<int>& members,
                                                                 const std::string& scope) {
  std::lock_guard deviceLock(deviceMutex_);
  backend::Backend* made =
      backend_->deviceBackend() != nullptr ? backend_.get() : deviceBackend_.get();
  if (made == nullptr)
    return nullptr;
  backend::BackendOptions options;
  options.rank = key;
  options.size = static_cast<int>(members.size());
  for (int member : members) options.worldRanks.push_back(info_.worldRanks[member]);
  options.scope = scope;
  options.device = made->deviceBackend()->cudaDevice();
  options.deadline = Deadline::after(timeout());
  try {
    return made->deviceBackend()->split(color, key, options);
  } catch (...) {
    failWith(std::current_exception());
    throw;
  }
}

void CommunicatorState::adoptDeviceBackend(std::unique_ptr<backend::Backend> device) {
  std::lock_guard deviceLock(deviceMutex_);
  CHORUS_ASSERT(deviceBackend_ == nullptr && device != nullptr && device->deviceBackend());
  deviceBackend_ = std::move(device);
  publishedDeviceBackend_.store(deviceBackend_.get());
}

void CommunicatorState::setTimeout(std::chrono::milliseconds timeout) {
  CHORUS_CHECK_ARG(timeout.count() > 0, "timeout must be positive, got ", timeout.count(), " ms");
  std::lock_guard lock(mutex_);
  timeout_ = timeout;
}

std::chrono::milliseconds CommunicatorState::timeout() const {
  std::lock_guard lock(mutex_);
  return timeout_;
}

void CommunicatorState::abort(const std::string& why, int failedRank) noexcept {
  std::exception_ptr reason;
  try {
    throw PeerError(concat("rank ", info_.worldRank, " (this process): ", why),
                    failedRank >= 0 ? failedRank : info_.worldRank);
  } catch (...) {
    reason = std::current_exception();
  }
  failWith(reason);
}

uint64_t CommunicatorState::nextSplitId() {
  std::lock_guard lock(mutex_);
  return ++splitCount_;
}

uint64_t CommunicatorState::nextSubgroupCount(const std::string& name) {
  std::lock_guard lock(mutex_);
  return ++subgroupCounts_[name];
}

}  // namespace chorus::detail

namespace chorus {

BlockingCalls::BlockingCalls() { ++detail::blockingCallsDepth; }
BlockingCalls::~BlockingCalls() { --detail::blockingCallsDepth; }
bool BlockingCalls::active() { return detail::blockingCallsDepth > 0; }

}  // namespace chorus
