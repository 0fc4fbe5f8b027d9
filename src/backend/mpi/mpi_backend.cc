// The native MPI backend: see mpi_backend.h. Cost: whatever the MPI library's collective costs
// (Open MPI's tuned module picks ring / recursive doubling / binomial trees by size), plus one
// MPI_Test per yield of the CPU while waiting.
#include "backend/mpi/mpi_backend.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "backend/mpi/mpi_types.h"
#include "connector/mpi_environment.h"
#include "core/check.h"
#include "core/mpi_tag_halves.h"
#include "core/stall_watch.h"
#include "trace/recorder.h"
#include "transport/transport.h"

namespace chorus::backend::mpi {
namespace {

// Note [Where MPI's reductions differ from chorus's]
// The mpi backend gives the results of the other CPU backends (chorus/types.h), so it leaves to
// chorus's kernels (the fallback's algorithms) the reductions whose MPI results differ:
//  - Open MPI 4.1's AVX reduction component (op/avx, on by default where the CPU has AVX) sums 8-
//    and 16-bit integers with saturating instructions: MPI_SUM of int8 127 and 127 gives 127, not
//    -2 (open-mpi/ompi#8045, closed "wontfix"). chorus's sums wrap.
//  - MPI_MIN and MPI_MAX of floats return the other operand where one is NaN, in an order that
//    depends on the algorithm (min(NaN, 1) was 1 on 2 ranks). chorus's propagate NaN.
//  - MPI's logical ops on MPI_C_BOOL work on the bytes: a bool byte of 2 or-ed with 0 stays 2,
//    and 2 xor 1 is 3 (true), where true xor true is false. chorus treats any non-zero byte as
//    true and writes 0 or 1.
//  - Open MPI's complex product recovers infinities as C99's Annex G does ((inf+infj)(inf+0j) is
//    inf+infj); chorus's is the textbook product, NumPy's (nan+nanj there).
// All were found by tests (tests/mpi/same_results.py, tests/mpi/edge_results.py); what MPI still
// runs natively (integer, float and complex sums, integer min/max/prod/bitwise, float prod) gives
// chorus's results.
bool differsFromChorus(DataType dtype, ReduceOp op) {
  const bool narrow = dtype == DataType::kInt8 || dtype == DataType::kUInt8 ||
                      dtype == DataType::kInt16 || dtype == DataType::kUInt16;
  if (narrow && (op == ReduceOp::kSum || op == ReduceOp::kAvg))
    return true;
  if (dtype == DataType::kBool || (isComplex(dtype) && op == ReduceOp::kProd))
    return true;
  return isFloatingPoint(dtype) && (op == ReduceOp::kMin || op == ReduceOp::kMax);
}

bool native(DataType dtype, ReduceOp op, size_t count) {
  return mpiType(dtype) != MPI_DATATYPE_NULL && mpiOp(op, dtype) != MPI_OP_NULL &&
         !differsFromChorus(dtype, op) && count <= static_cast<size_t>(INT_MAX);
}

// MPI_Test passes before a waiting rank starts yielding the CPU between tests: short operations
// finish without a trip through the scheduler, long ones leave the core to others.
constexpr int kSpinPasses = 1024;

bool fitsInt(size_t n) { return n <= static_cast<size_t>(INT_MAX); }

// A fingerprint as the words the agreement reduces (see Note [Fingerprints over MPI]).
constexpr int kFingerprintWords = 8;
using FingerprintWords = std::array<int64_t, kFingerprintWords>;

FingerprintWords toWords(const Fingerprint& f) {
  return {static_cast<int64_t>(f.sequence),
          static_cast<int64_t>(f.count),
          f.root,
          static_cast<int64_t>(f.collective),
          f.reduceOp,
          f.dataType,
          f.algorithm,
          static_cast<int64_t>(f.shape)};
}

Fingerprint fromWords(const int64_t* words) {
  Fingerprint f;
  f.sequence = static_cast<uint64_t>(words[0]);
  f.count = static_cast<uint64_t>(words[1]);
  f.root = static_cast<int32_t>(words[2]);
  f.collective = static_cast<Collective>(words[3]);
  f.reduceOp = static_cast<uint8_t>(words[4]);
  f.dataType = static_cast<uint8_t>(words[5]);
  f.algorithm = static_cast<uint8_t>(words[6]);
  f.shape = static_cast<uint64_t>(words[7]);
  return f;
}

int asInt(size_t n) { return static_cast<int>(n); }

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm,
                       std::unique_ptr<Backend> fallback,
                       detail::RankNames names,
                       Deadline deadline)
    : comm_(comm),
      names_(std::move(names)),
      census_(comm, names_, deadline),
      fallback_(std::move(fallback)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int* tagUb = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &found);
  if (found && tagUb != nullptr)
    tagUpperBound_ = *tagUb;
}

MpiBackend::~MpiBackend() {
  fallback_.reset();
  if (comm_ != MPI_COMM_NULL && !connector::mpiFinalized())
    MPI_Comm_free(&comm_);
}

void MpiBackend::checkUsable() {
  if (!failed_.load())
    return;
  std::lock_guard lock(failureMutex_);
  std::rethrow_exception(failure_);
}

void MpiBackend::abort(std::exception_ptr reason) noexcept {
  {
    std::lock_guard lock(failureMutex_);
    if (!failure_)
      failure_ = reason;
    failed_.store(true);
  }
  if (fallback_)
    fallback_->abort(reason);
}

void MpiBackend::close() noexcept {
  if (fallback_)
    fallback_->close();
}

// The TimeoutError of `what` (an MPI call): naming the ranks that have not arrived (the census's,
// or `peer`), else saying that some rank did not join.
TimeoutError MpiBackend::timeoutIn(const char* what, int peer) {
  return timeoutAmong(what, peer >= 0 ? std::vector<int>{names_(peer)} : std::vector<int>{});
}

TimeoutError MpiBackend::timeoutAmong(const char* what, std::vector<int> owing) {
  std::vector<int> late = stall::missingRanks(std::move(owing));
  if (!late.empty())
    return transport::makeTimeoutError(names_(rank_), std::move(late));
  return TimeoutError(detail::concat("rank ", names_(rank_),
                                     " (this process): ", stall::describeTimeout(), " in ", what,
                                     " (a rank of this communicator did not join it); raise the "
                                     "timeout (CHORUS_TIMEOUT) or make every rank call it"));
}

template <typename Start>
MPI_Status MpiBackend::run(const CallContext& call, const char* what, int peer, Start start) {
  checkUsable();
  try {
    MPI_Request request = MPI_REQUEST_NULL;
    connector::checkMpi(start(&request), what, names_(rank_), names_(peer));
    MPI_Status status;
    for (int pass = 0;; ++pass) {
      int done = 0;
      connector::checkMpi(MPI_Test(&request, &done, &status), what, names_(rank_), names_(peer));
      if (call.whileWaiting)        // the front end's transfers (Note [Collectives and transfers
        (void)call.whileWaiting();  // together]): it posts new ones and calls pollTransfers()
      if (done)
        break;
      if ((pass & 63) == 0) {
        checkUsable();
        if (call.deadline.expired())
          throw timeoutIn(what, peer);
        if (Clock::now() >= stall::nextCheckAt())
          stall::onStalled(peer >= 0 ? std::vector<int>{names_(peer)} : std::vector<int>{});
      }
      if (pass >= kSpinPasses)
        sched_yield();
    }
    return status;
  } catch (...) {
    abort(std::current_exception());
    throw;
  }
}

// Note [Fingerprints over MPI]
// MPI's collectives carry no chorus fingerprint (Note [Collective fingerprint]), so before each
// collective the ranks agree on theirs: one MPI_Iallreduce(MAX) of the fingerprint's words and
// their negations gives every rank the maximum and the minimum of each field. If they differ for
// any field, the calls differ: an MPI_Iallgather of the fingerprints (only then) lets every rank
// name a rank whose call differs from its own (rank 0's if it differs, else the first that does),
// and every rank raises the same kind of MismatchError as over the transports. It runs before the
// native-or-fallback choice, so ranks whose calls would take different paths are caught too.
// Cost: one small allreduce per collective (latency-bound; see docs/benchmarks.md).
void MpiBackend::checkFingerprints(const CallContext& call) {
  if (size_ == 1)
    return;
  const FingerprintWords mine = toWords(call.fingerprint);
  std::array<int64_t, 2 * kFingerprintWords> extremes;
  for (int i = 0; i < kFingerprintWords; ++i) {
    extremes[i] = mine[i];
    extremes[kFingerprintWords + i] = -mine[i];
  }
  run(call, "MPI_Iallreduce (fingerprint check)", -1, [&](MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, extremes.data(), 2 * kFingerprintWords, MPI_INT64_T,
                          MPI_MAX, comm_, request);
  });
  // An allreduce completes only once every rank has contributed: this rank now knows that every
  // peer has arrived (Note [Timeline], as the shm backend's arrival round notes it).
  trace::noteAllArrived(call.record);
  bool agreed = true;
  for (int i = 0; i < kFingerprintWords; ++i)
    agreed = agreed && extremes[i] == -extremes[kFingerprintWords + i];
  if (agreed)
    return;
  std::vector<int64_t> all(static_cast<size_t>(size_) * kFingerprintWords);
  run(call, "MPI_Iallgather (fingerprint check)", -1, [&](MPI_Request* request) {
    return MPI_Iallgather(mine.data(), kFingerprintWords, MPI_INT64_T, all.data(),
                          kFingerprintWords, MPI_INT64_T, comm_, request);
  });
  auto differs = [&](int rank) {
    return !call.fingerprint.firstDifference(fromWords(&all[rank * kFingerprintWords])).empty();
  };
  int peer = rank_ != 0 && differs(0) ? 0 : -1;
  for (int rank = 0; peer < 0 && rank < size_; ++rank) {
    if (differs(rank))
      peer = rank;
  }
  CHORUS_ASSERT(peer >= 0);
  auto error = std::make_exception_ptr(makeMismatchError(
      names_(rank_), names_(peer), call.fingerprint, fromWords(&all[peer * kFingerprintWords])));
  abort(error);
  std::rethrow_exception(error);
}

Backend& MpiBackend::fallback(const char* what) {
  if (!fallback_) {
    throw UnsupportedError(detail::concat("backend 'mpi' cannot run this ", what,
                                          " natively (float16/bfloat16, bool, bitwise ops on "
                                          "floats, min/max on floats, complex products, sums of "
                                          "8- and 16-bit integers, or more than INT_MAX "
                                          "elements) and "
                                          "this build has no MPI transport for chorus's "
                                          "algorithms; convert the tensor or use another "
                                          "backend"));
  }
  return *fallback_;
}

void MpiBackend::allreduce(const CallContext& call, const AllreduceArgs& args) {
  checkFingerprints(call);
  if (!native(args.dtype, args.op, args.count))
    return fallback("allreduce").allreduce(call, args);
  run(call, "MPI_Iallreduce", -1, [&](MPI_Request* request) {
    return MPI_Iallreduce(args.inPlace() ? MPI_IN_PLACE : args.input, args.output,
                          asInt(args.count), mpiType(args.dtype), mpiOp(args.op, args.dtype), comm_,
                          request);
  });
}

void MpiBackend::reduceScatter(const CallContext& call, const ReduceScatterArgs& args) {
  checkFingerprints(call);
  if (!native(args.dtype, args.op, args.countPerRank * size_))
    return fallback("reduce_scatter").reduceScatter(call, args);
  run(call, "MPI_Ireduce_scatter_block", -1, [&](MPI_Request* request) {
    return MPI_Ireduce_scatter_block(args.input, args.output, asInt(args.countPerRank),
                                     mpiType(args.dtype), mpiOp(args.op, args.dtype), comm_,
                                     request);
  });
}

void MpiBackend::allgather(const CallContext& call, const AllgatherArgs& args) {
  checkFingerprints(call);
  if (!fitsInt(args.bytesPerRank * size_))
    return fallback("allgather").allgather(call, args);
  char* mine = static_cast<char*>(args.output) + args.bytesPerRank * rank_;
  const bool inPlace = args.input == mine;
  run(call, "MPI_Iallgather", -1, [&](MPI_Request* request) {
    return MPI_Iallgather(inPlace ? MPI_IN_PLACE : args.input, asInt(args.bytesPerRank), MPI_BYTE,
                          args.output, asInt(args.bytesPerRank), MPI_BYTE, comm_, request);
  });
}

void MpiBackend::broadcast(const CallContext& call, const BroadcastArgs& args) {
  checkFingerprints(call);
  if (!fitsInt(args.bytes))
    return fallback("broadcast").broadcast(call, args);
  if (rank_ == args.root)
    copyToOutput(args.input, args.output, args.bytes);
  run(call, "MPI_Ibcast", -1, [&](MPI_Request* request) {
    return MPI_Ibcast(args.output, asInt(args.bytes), MPI_BYTE, args.root, comm_, request);
  });
}

void MpiBackend::reduce(const CallContext& call, const ReduceArgs& args) {
  checkFingerprints(call);
  if (!native(args.dtype, args.op, args.count))
    return fallback("reduce").reduce(call, args);
  run(call, "MPI_Ireduce", -1, [&](MPI_Request* request) {
    return MPI_Ireduce(args.input, rank_ == args.root ? args.output : nullptr, asInt(args.count),
                       mpiType(args.dtype), mpiOp(args.op, args.dtype), args.root, comm_, request);
  });
}

void MpiBackend::gather(const CallContext& call, const GatherArgs& args) {
  checkFingerprints(call);
  if (!fitsInt(args.bytesPerRank * size_))
    return fallback("gather").gather(call, args);
  run(call, "MPI_Igather", -1, [&](MPI_Request* request) {
    return MPI_Igather(args.input, asInt(args.bytesPerRank), MPI_BYTE, args.output,
                       asInt(args.bytesPerRank), MPI_BYTE, args.root, comm_, request);
  });
}

void MpiBackend::scatter(const CallContext& call, const ScatterArgs& args) {
  checkFingerprints(call);
  if (!fitsInt(args.bytesPerRank * size_))
    return fallback("scatter").scatter(call, args);
  run(call, "MPI_Iscatter", -1, [&](MPI_Request* request) {
    return MPI_Iscatter(args.input, asInt(args.bytesPerRank), MPI_BYTE, args.output,
                        asInt(args.bytesPerRank), MPI_BYTE, args.root, comm_, request);
  });
}

void MpiBackend::allToAll(const CallContext& call, const AllToAllArgs& args) {
  checkFingerprints(call);
  if (!fitsInt(args.bytesPerRank * size_))
    return fallback("all_to_all").allToAll(call, args);
  run(call, "MPI_Ialltoall", -1, [&](MPI_Request* request) {
    return MPI_Ialltoall(args.input, asInt(args.bytesPerRank), MPI_BYTE, args.output,
                         asInt(args.bytesPerRank), MPI_BYTE, comm_, request);
  });
}

// Note [Splits over MPI]
// MPI_Alltoallv trusts its counts: one that disagrees with the peer's is an MPI error or a cut
// message. So first an MPI_Ialltoall of the byte counts tells each rank what every peer will send
// it, which it compares with what it expects; then an MPI_Iallreduce(MIN) gives every rank the
// first disagreeing pair (sender * size + receiver), with whether every rank's counts fit MPI's
// int (else all take the fallback together); on a disagreement only, an MPI_Ibcast from that
// pair's receiver brings both counts, so every rank raises the same MismatchError.
bool MpiBackend::checkSplits(const CallContext& call, const AllToAllVArgs& args) {
  bool fits = true;
  for (int peer = 0; peer < size_; ++peer) {
    fits = fits && fitsInt(args.sendOffsets[peer] + args.sendBytes[peer]) &&
           fitsInt(args.recvOffsets[peer] + args.recvBytes[peer]);
  }
  if (size_ == 1)
    return fits;  // the front end checked the one pair
  std::vector<int64_t> sending(args.sendBytes.begin(), args.sendBytes.end());
  std::vector<int64_t> coming(size_);
  run(call, "MPI_Ialltoall (split check)", -1, [&](MPI_Request* request) {
    return MPI_Ialltoall(sending.data(), 1, MPI_INT64_T, coming.data(), 1, MPI_INT64_T, comm_,
                         request);
  });
  constexpr int64_t kNoPair = std::numeric_limits<int64_t>::max();
  std::array<int64_t, 2> verdict{kNoPair, fits ? 1 : 0};  // reduced by MIN
  for (int sender = 0; sender < size_ && verdict[0] == kNoPair; ++sender) {
    if (coming[sender] != static_cast<int64_t>(args.recvBytes[sender]))
      verdict[0] = int64_t{sender} * size_ + rank_;
  }
  run(call, "MPI_Iallreduce (split check)", -1, [&](MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, verdict.data(), 2, MPI_INT64_T, MPI_MIN, comm_, request);
  });
  if (verdict[0] == kNoPair)
    return verdict[1] == 1;
  const int sender = static_cast<int>(verdict[0] / size_);
  const int receiver = static_cast<int>(verdict[0] % size_);
  std::array<int64_t, 2> counts{0, 0};
  if (receiver == rank_)
    counts = {coming[sender], static_cast<int64_t>(args.recvBytes[sender])};
  run(call, "MPI_Ibcast (split check)", receiver, [&](MPI_Request* request) {
    return MPI_Ibcast(counts.data(), 2, MPI_INT64_T, receiver, comm_, request);
  });
  auto error = std::make_exception_ptr(
      makeSplitMismatchError(names_(sender), names_(receiver), call.fingerprint,
                             static_cast<uint64_t>(counts[0]), static_cast<uint64_t>(counts[1])));
  abort(error);
  std::rethrow_exception(error);
}

void MpiBackend::allToAllV(const CallContext& call, const AllToAllVArgs& args) {
  checkFingerprints(call);
  if (!checkSplits(call, args))
    return fallback("all_to_all_v").allToAllV(call, args);
  auto ints = [](std::span<const size_t> values) {
    return std::vector<int>(values.begin(), values.end());
  };
  const std::vector<int> sendCounts = ints(args.sendBytes), sendOffsets = ints(args.sendOffsets);
  const std::vector<int> recvCounts = ints(args.recvBytes), recvOffsets = ints(args.recvOffsets);
  run(call, "MPI_Ialltoallv", -1, [&](MPI_Request* request) {
    return MPI_Ialltoallv(args.input, sendCounts.data(), sendOffsets.data(), MPI_BYTE, args.output,
                          recvCounts.data(), recvOffsets.data(), MPI_BYTE, comm_, request);
  });
}

void MpiBackend::barrier(const CallContext& call) {
  checkFingerprints(call);
  run(call, "MPI_Ibarrier", -1, [&](MPI_Request* request) { return MPI_Ibarrier(comm_, request); });
}

void MpiBackend::send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) {
  const int onMpi = mpiTag(tag);
  if (!fitsInt(bytes))
    return fallback("send").send(call, data, bytes, peer, tag);
  run(call, "MPI_Isend", peer, [&](MPI_Request* request) {
    return MPI_Isend(data, asInt(bytes), MPI_BYTE, peer, onMpi, comm_, request);
  });
}

void MpiBackend::recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) {
  const int onMpi = mpiTag(tag);
  if (!fitsInt(bytes))
    return fallback("recv").recv(call, data, bytes, peer, tag);
  MPI_Status status = run(call, "MPI_Irecv", peer, [&](MPI_Request* request) {
    return MPI_Irecv(data, asInt(bytes), MPI_BYTE, peer, onMpi, comm_, request);
  });
  checkReceivedBytes(status, bytes, peer, tag);
}

int MpiBackend::mpiTag(int tag) const {
  // Note [Two halves of the MPI tags] (core/mpi_tag_halves.h), over the whole MPI range.
  const int64_t onMpi = tag < 0 ? -1 : detail::mpiTagInHalves(uint64_t(tag), 0, tagUpperBound_);
  CHORUS_CHECK_ARG(onMpi >= 0, "rank ", names_(rank_), " (this process): tag ", tag,
                   " is beyond backend mpi's tags, which are ",
                   detail::tagsInHalves(0, tagUpperBound_), " with this MPI (MPI_TAG_UB ",
                   tagUpperBound_, "); use a smaller tag");
  return static_cast<int>(onMpi);
}

void MpiBackend::checkReceivedBytes(const MPI_Status& status, size_t bytes, int peer, int tag) {
  int received = 0;
  MPI_Get_count(&status, MPI_BYTE, &received);
  if (received != asInt(bytes)) {
    auto error = std::make_exception_ptr(MismatchError(
        detail::concat("rank ", names_(rank_), " (this process) expected ", bytes,
                       " bytes from rank ", names_(peer), " with tag ", tag, " but rank ",
                       names_(peer), " sent ", received, "; send and recv must agree on the size"),
        "count", {names_(rank_), names_(peer)}));
    abort(error);
    std::rethrow_exception(error);
  }
}

void MpiBackend::postSend(const CallContext& call,
                          const void* data,
                          size_t bytes,
                          int peer,
                          int tag,
                          Transfer& transfer) {
  post(call, const_cast<void*>(data), bytes, peer, tag, transfer, /*isSend=*/true);
}

void MpiBackend::postRecv(
    const CallContext& call, void* data, size_t bytes, int peer, int tag, Transfer& transfer) {
  post(call, data, bytes, peer, tag, transfer, /*isSend=*/false);
}

void MpiBackend::post(const CallContext& call,
                      void* data,
                      size_t bytes,
                      int peer,
                      int tag,
                      Transfer& transfer,
                      bool isSend) {
  const int onMpi = mpiTag(tag);
  const bool anyPeer = !isSend && peer == transport::kAnyPeer;
  if (!fitsInt(bytes)) {  // whole, through the fallback
    if (anyPeer) {
      throw UnsupportedError(detail::concat(
          "rank ", names_(rank_), " (this process): a receive from any rank of ", bytes,
          " bytes; backend mpi receives at most 2 GiB from any rank: name the sender"));
    }
    if (isSend)
      send(call, data, bytes, peer, tag);
    else
      recv(call, data, bytes, peer, tag);
    transfer.request.done = true;
    return;
  }
  checkUsable();
  Posted& posted = posted_[&transfer];
  posted = Posted{MPI_REQUEST_NULL, isSend, bytes, peer, tag};
  const char* what = isSend ? "MPI_Isend" : "MPI_Irecv";
  try {
    int code = isSend ? MPI_Isend(data, asInt(bytes), MPI_BYTE, peer, onMpi, comm_, &posted.request)
                      : MPI_Irecv(data, asInt(bytes), MPI_BYTE, anyPeer ? MPI_ANY_SOURCE : peer,
                                  onMpi, comm_, &posted.request);
    connector::checkMpi(code, what, names_(rank_), names_(peer));
  } catch (...) {
    posted_.erase(&transfer);
    abort(std::current_exception());
    throw;
  }
}

bool MpiBackend::postReturnsAtOnce(size_t bytes) const { return fitsInt(bytes); }

bool MpiBackend::testPosted(Transfer& transfer) {
  auto found = posted_.find(&transfer);
  CHORUS_ASSERT(found != posted_.end());
  Posted& posted = found->second;
  int done = 0;
  MPI_Status status;
  status.MPI_SOURCE = MPI_ANY_SOURCE;
  const int code = MPI_Test(&posted.request, &done, &status);
  if (posted.peer == transport::kAnyPeer && status.MPI_SOURCE >= 0 && status.MPI_SOURCE < size_) {
    posted.peer = status.MPI_SOURCE;  // the sender of a receive from any rank, also to name it
    transfer.request.peer = status.MPI_SOURCE;
  }
  connector::checkMpi(code, posted.isSend ? "MPI_Isend" : "MPI_Irecv", names_(rank_),
                      names_(posted.peer));
  if (!done)
    return false;
  if (!posted.isSend)
    checkReceivedBytes(status, posted.bytes, posted.peer, posted.tag);
  transfer.request.done = true;
  posted_.erase(found);
  return true;
}

void MpiBackend::notifyCompletedTransfers() {
  for (auto next = posted_.begin(); next != posted_.end();) {
    Transfer& transfer = *next->first;
    ++next;  // testPosted forgets a transfer that is done
    if (transfer.request.listener != nullptr && testPosted(transfer))
      std::exchange(transfer.request.listener, nullptr)->completed(transfer.request);
  }
}

bool MpiBackend::waitSome(std::span<Transfer* const> transfers, Deadline deadline) {
  checkUsable();
  try {
    for (int pass = 0;; ++pass) {
      bool some = false;
      for (Transfer* transfer : transfers) {
        if (transfer->done() || testPosted(*transfer))
          some = true;
      }
      if (some)
        return true;
      if (interrupted_.exchange(false, std::memory_order_acq_rel))
        return false;
      if ((pass & 63) == 0) {
        checkUsable();
        if (deadline.expired())
          throw timeoutAmong("send/recv", owingRanks(transfers));
        if (Clock::now() >= stall::nextCheckAt())
          stall::onStalled(owingRanks(transfers));
      }
      if (pass >= kSpinPasses)
        sched_yield();
    }
  } catch (...) {
    abort(std::current_exception());
    throw;
  }
}

// The world ranks that `transfers` still wait for: each one's peer, every other rank for a receive
// from any rank.
std::vector<int> MpiBackend::owingRanks(std::span<Transfer* const> transfers) const {
  std::vector<int> owing;
  for (Transfer* transfer : transfers) {
    if (transfer->done())
      continue;
    const int peer = posted_.at(transfer).peer;
    for (int q = 0; q < size_; ++q) {
      const bool owes = peer == transport::kAnyPeer ? q != rank_ : q == peer;
      if (owes && std::find(owing.begin(), owing.end(), names_(q)) == owing.end())
        owing.push_back(names_(q));
    }
  }
  return owing;
}

}  // namespace chorus::backend::mpi
