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
#include "runtime/queued_work.h"
#include "store/prefix_store.h"
#include "trace/flight_record.h"

namespace chorus::detail {
namespace {

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
  // A batch of transfers that waits takes a collective behind it (Note [Collectives and
  // transfers together]): wake it, as submitPointToPoint does for a transfer.
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
    runWithTransfers(
        body, backend::CallContext{fingerprint, Deadline(startedAt + timeout), &ticket}, hold);
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
