// A non-blocking NCCL communicator: see nccl_communicator.h.
#include "backend/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <chrono>

#include "backend/nccl/backoff.h"
#include "backend/nccl/nccl_status.h"
#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend::nccl {
namespace {

// NCCL has no way to wait for a non-blocking call other than asking: ask, without sleeping for
// `spinFor`, then pausing up to 1 ms between questions (a setup takes milliseconds to seconds).
template <typename Ask>
ncclResult_t pollWhileInProgress(Ask ask,
                                 Deadline deadline,
                                 std::chrono::microseconds spinFor = std::chrono::microseconds(0)) {
  Backoff backoff(std::chrono::microseconds(1000), spinFor);
  for (;;) {
    const ncclResult_t state = ask();
    if (state != ncclInProgress || deadline.expired())
      return state;
    backoff.pause();
  }
}

}  // namespace

ncclConfig_t NcclCommunicator::configFor(const CommunicatorSpec& spec) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = spec.name.c_str();
  return config;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(const ncclUniqueId& id,
                                                           const CommunicatorSpec& spec) {
  checkCuda(cudaSetDevice(spec.device), "cudaSetDevice", spec.worldRank);
  ncclConfig_t config = configFor(spec);
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, spec.size, id, spec.rank, &config);
  if (comm == nullptr)
    checkNccl(result, "ncclCommInitRankConfig", spec.worldRank);
  std::unique_ptr<NcclCommunicator> made(new NcclCommunicator(comm, spec));
  made->settle(result, "ncclCommInitRankConfig", spec.deadline);
  return made;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::split(int color,
                                                          int key,
                                                          const CommunicatorSpec& spec) {
  ncclConfig_t config = configFor(spec);
  ncclComm_t comm = nullptr;
  const ncclResult_t result =
      call([&](ncclComm_t parent) { return ncclCommSplit(parent, color, key, &comm, &config); });
  // The parent settles first: a split is a call on it, and NCCL (2.23 on) fills in the child
  // only once the parent is done (NVIDIA/nccl#1472).
  settle(result, "ncclCommSplit", spec.deadline);
  if (comm == nullptr && color == NCCL_SPLIT_NOCOLOR)
    return nullptr;
  if (comm == nullptr) {  // a rank that went on without its child would leave its group hanging
    abort();
    throw InternalError(
        detail::concat("rank ", spec_.worldRank, " (this process): ncclCommSplit (color ", color,
                       ") gave no communicator although it reported success; its parent ",
                       spec_.name, " was aborted"));
  }
  std::unique_ptr<NcclCommunicator> made(new NcclCommunicator(comm, spec));
  made->settle(ncclInProgress, "ncclCommSplit", spec.deadline);
  return made;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr || aborted_.load())
    return;  // ncclCommAbort freed it
  if (asyncError() == ncclSuccess) {
    // A clean end: finalize (flushes NCCL's pending work), then destroy. A finalize that does not
    // end in time is aborted instead, so a destructor never hangs.
    ncclResult_t state = ncclCommFinalize(comm_);
    if (state == ncclInProgress || state == ncclSuccess) {
      state = pollWhileInProgress([this] { return asyncError(); },
                                  Deadline::after(std::chrono::seconds(10)));
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
      return;
    }
  }
  abort();
}

void NcclCommunicator::settle(ncclResult_t result,
                              const char* call,
                              Deadline deadline,
                              std::chrono::microseconds spinFor) {
  if (result == ncclSuccess)
    return;  // done (a collective: enqueued); its later errors come asynchronously
  if (result != ncclInProgress)
    checkNccl(result, call, spec_.worldRank, lastError());
  const ncclResult_t state =
      pollWhileInProgress([this] { return asyncError(); }, deadline, spinFor);
  if (state == ncclInProgress) {
    abort();
    throw TimeoutError(detail::concat(
        "rank ", spec_.worldRank, " (this process): ", call, " on NCCL communicator ", spec_.name,
        " did not finish by the deadline; it was aborted (a member may not have called it, or "
        "NCCL cannot connect the members: NCCL_DEBUG=INFO says more)"));
  }
  checkNccl(state, call, spec_.worldRank, lastError());
}

std::string NcclCommunicator::lastError() {
  std::string text;
  call([&](ncclComm_t comm) {
    const char* last = ncclGetLastError(comm);
    text = last == nullptr ? "" : last;
    return ncclSuccess;
  });
  return text.empty() && aborted_.load() ? "the communicator was aborted" : text;
}

ncclResult_t NcclCommunicator::asyncError() noexcept {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked =
      call([&](ncclComm_t comm) { return ncclCommGetAsyncError(comm, &state); });
  return asked == ncclSuccess ? state : asked;
}

void NcclCommunicator::abort() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!aborted_.exchange(true) && comm_ != nullptr)
    ncclCommAbort(comm_);
}

}  // namespace chorus::backend::nccl
