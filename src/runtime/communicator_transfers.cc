// The point-to-point side of CommunicatorState (communicator_state.h): send and recv as transfers
// that the worker posts and runs in batches (Note [Point-to-point overlap]), and how collectives
// and transfers run together (Note [Collectives and transfers together], below).
#include <algorithm>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "core/check.h"
#include "core/stall_watch.h"
#include "runtime/communicator_state.h"
#include "runtime/queued_work.h"
#include "trace/recorder.h"

namespace chorus::detail {
namespace {

int64_t nanoseconds(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

std::string describeFingerprint(const void* fingerprint) {
  return static_cast<const Fingerprint*>(fingerprint)->describe();
}

}  // namespace

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
  // Its bytes moved while a collective ran (Note [Collectives and transfers together]).
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
    if (batch_ != nullptr)
      batch_->joining.push_back(pending);  // taken by the running operation
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
  else if (collectiveTakesTransfers_.load(std::memory_order_seq_cst))
    backend_->wakeCollective();
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

// Note [Collectives and transfers together]
// MPI lets the collectives and the point-to-point transfers of one communicator overlap, and
// programs rely on it, both ways:
//  - A collective starts while transfers issued before it are in flight: a rank posts a receive
//    and enters a barrier, and its peer sends only after the barrier (irecv; barrier; send on the
//    peer); or a rank sends asynchronously before a collective that its receiver enters before
//    its receive.
//  - A transfer issued while a collective runs starts at once: an async allreduce, then a send
//    whose receiver receives before it enters the allreduce (torch.distributed over gloo runs
//    that too).
// So on a backend whose collectives keep posted transfers moving
// (Backend::collectivesMoveTransfers: every backend that posts them):
//  - The batch of transfers that holds the queue (Note [Point-to-point overlap]) also takes a
//    collective queued right behind it and runs it at once, on the worker, with its transfers still
//    posted (runAmidTransfers).
//  - Every wait of every collective calls whileCollectiveWaits (CallContext::whileWaiting), on the
//    thread that runs it: it posts the transfers queued behind the collective, in call order,
//    wherever they are (collectives queued before them stay queued: a data-parallel step's bucket
//    allreduces may be), and polls the posted ones (Backend::pollTransfers) where the collective's
//    own waits do not move them (the shm group's, the hierarchical backend's node and leaders
//    steps'; over a transport its waits move every posted request, and MPI's progress engine
//    moves its own). A transfer issued while the collective sleeps wakes it
//    (Backend::wakeCollective); while transfers are in flight its waits sleep a millisecond at
//    most. One that the backend would run whole (the mpi backend's above 2 GiB) waits, with those
//    behind it, for the collective's end. When the collective ends, the transfers it started go on
//    as a batch on the worker: the collective hands them over as the queue's next operation
//    (pushFront), which only the worker runs, and which then takes what follows, as any batch
//    does.
// A transfer that finishes during a collective completes its Work at once, not when the
// collective ends: each has a listener (Request::listener) for the collective's time, which the
// wait pass or poll that finds it done tells, so a program may wait for it while the collective
// runs and go on to what the collective's peers wait for. After the collective a wait that returns
// at once marks what is done. Each transfer keeps its own deadline and the collective its own;
// once a transfer's has passed the batch takes no more collectives, and its wait fails it. A
// failure of either fails the communicator, and both. As in MPI, a transfer and a collective in
// flight together must not share a buffer that either writes (an async allreduce of x, then a send
// of x, may send x half reduced): the program waits for the first before it issues the second.
// What remains: collectives run one at a time, in call order (every rank's order), so a
// collective queued behind another waits for it; and a blocking send or recv that runs whole on
// its caller's thread (BlockingCalls, idle queue) still holds a collective that another thread
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
               "collective (Note [Collectives and transfers together])"),
        timeout.missingRanks()));
  } catch (...) {
    return error;
  }
}

void CommunicatorState::runWithTransfers(BodyRef body, backend::CallContext call, Hold hold) {
  if (call.fingerprint.collective == Collective::kPointToPoint ||
      !backend_->collectivesMoveTransfers()) {
    body(call);
    return;
  }
  auto whileWaiting = [this] { return whileCollectiveWaits(); };
  call.whileWaiting = whileWaiting;
  const bool own = hold != Hold::kAmidTransfers;  // else the batch's, which runAmidTransfers keeps
  if (own) {
    CHORUS_ASSERT(batch_ == nullptr && collectiveTransfers_.empty());
    batch_ = &collectiveTransfers_;
  }
  // A transfer pushed from here on wakes the collective's waits (submitPointToPoint).
  collectiveTakesTransfers_.store(true, std::memory_order_seq_cst);
  auto after = [&] {
    collectiveTakesTransfers_.store(false, std::memory_order_seq_cst);
    if (own)
      handOverTransfers();
  };
  try {
    body(call);
  } catch (...) {
    after();
    throw;
  }
  after();
}

bool CommunicatorState::whileCollectiveWaits() {
  if (inWhileWaiting_)  // a wait inside its own posting: the outer call goes on
    return false;
  inWhileWaiting_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{inWhileWaiting_};
  TransferBatch& batch = *batch_;
  bool took = false;
  if (queue_.pointToPointQueued()) {
    // Each joins batch.joining (submitPointToPoint's operation), in call order; collectives queued
    // before them stay queued.
    while (OperationQueue::Operation next = queue_.takePointToPoint()) {
      (*next)();
      took = true;
    }
  }
  if (took) {
    const std::chrono::milliseconds timeout = this->timeout();
    // One that the backend would run whole waits, with those behind it, for the collective's end.
    while (!batch.joining.empty() &&
           backend_->postReturnsAtOnce(batch.joining.front()->call.tensor.nbytes())) {
      std::shared_ptr<PendingTransfer> transfer = std::move(batch.joining.front());
      batch.joining.erase(batch.joining.begin());
      batch.active.push_back(transfer);  // failing here fails the collective, and it with it
      startTransfer(*transfer, timeout);
      transfer->transfer.request.listener = transfer.get();
    }
  }
  const bool inFlight = std::any_of(batch.active.begin(), batch.active.end(),
                                    [](const auto& transfer) { return !transfer->finished; });
  return inFlight && backend_->pollTransfers();
}

void CommunicatorState::handOverTransfers() {
  batch_ = nullptr;
  if (collectiveTransfers_.empty())
    return;
  for (const auto& transfer : collectiveTransfers_.active)
    transfer->transfer.request.listener = nullptr;  // a wait of the batch marks them from now on
  auto batch = std::make_shared<TransferBatch>();
  std::swap(*batch, collectiveTransfers_);
  queue_.pushFront(
      std::make_shared<std::function<void()>>([this, batch] { continueTransfers(*batch); }));
}

void CommunicatorState::runAmidTransfers(const OperationQueue::Operation& collective,
                                         TransferBatch& batch) {
  for (const auto& transfer : batch.active) transfer->transfer.request.listener = transfer.get();
  {
    std::lock_guard lock(mutex_);
    amidTransfers_ = true;
  }
  // Whatever happens, later operations run as before: a listener not yet told is taken back (the
  // collective's waits may have added transfers: whileCollectiveWaits).
  auto after = [&] {
    {
      std::lock_guard lock(mutex_);
      amidTransfers_ = false;
    }
    for (const auto& transfer : batch.active) transfer->transfer.request.listener = nullptr;
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
  TransferBatch batch;
  batch.joining.push_back(std::move(first));
  continueTransfers(batch);
}

void CommunicatorState::continueTransfers(TransferBatch& batch) {
  auto& [active, joining, finished] = batch;
  std::vector<backend::Transfer*> waiting;
  std::exception_ptr error;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(mutex_);
    error = failure_;
    timeout = timeout_;
  }
  if (error && !active.empty())
    backend_->abort(error);  // a collective that failed left them posted: their buffers go away
  if (!error) {
    batch_ = &batch;
    try {
      stall::OperationScope scope(info_.worldRank, coarseNow(), timeout, &describeFingerprint,
                                  &(joining.empty() ? active : joining).front()->fingerprint);
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
            runAmidTransfers(collective, batch);
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
    batch_ = nullptr;
  }
  queue_.releaseRunning();
  for (auto* list : {&finished, &active, &joining}) {
    for (auto& transfer : *list) transfer->finish(list == &finished ? nullptr : error);
  }
}

}  // namespace chorus::detail
