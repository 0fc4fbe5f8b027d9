// chorus/communicator.h — a set of ranks that run collectives together.
//
// Contract:
//  - Every rank of a communicator must issue the same collectives in the same order with consistent
//    arguments (same op, dtype, count, root). An inconsistent call raises MismatchError on the
//    ranks that see it and aborts the communicator, so the others fail promptly instead of hanging
//    or returning wrong data: every collective carries a fingerprint of its arguments (sequence
//    number, op, dtype, count, root) that the ranks compare at their first exchange.
//  - Each operation validates its input on the calling thread (InvalidArgumentError, nothing sent),
//    then returns a Work at once. Operations run in call order, one at a time, on the
//    communicator's worker thread (or on a thread that waits for them, or under BlockingCalls on
//    the calling thread). Tensors must stay alive and untouched until the Work completes.
//  - Except point-to-point: sends and receives issued one after another are in flight together,
//    as MPI's and torch's isend/irecv are, so a receive posted before the send its peer waits for
//    does not hold that send back (backends mpi, mpi_algorithms, tcp, shm, hierarchical). Those
//    of one (peer, tag) still match in call order. A collective issued after them starts at once,
//    and they keep moving while it runs, as in MPI (irecv; barrier; the peer sends after its
//    barrier): one that finishes meanwhile completes its Work then. Sends and receives issued
//    while a collective runs (an async one, or one on another thread) start during it, as in MPI
//    (an async allreduce, then a send whose peer receives before it joins the allreduce), also
//    ahead of collectives queued behind the running one. So, as in MPI, a transfer and a collective
//    in flight together must not share a buffer that either writes. A collective issued after
//    another waits for it.
//  - Ranks and roots are ranks of this communicator (0..size()-1). Tensors must be contiguous CPU
//    tensors (GPU tensors: UnsupportedError until a GPU backend is built).
//  - No operation blocks forever: each has a deadline (DistConfig::timeout, CHORUS_TIMEOUT). A peer
//    that dies fails every pending operation with PeerError within seconds. After any failure the
//    communicator is aborted: later operations fail at once with the first error.
//  - float16 and bfloat16 reductions accumulate in float32 and round once at the end. avg is the
//    sum divided by size() (integers: truncated toward zero).
//  - A size-1 communicator performs every operation as the identity and opens no connection.
//  - Thread-safety: all methods may be called from any thread; calls from several threads are
//    serialized in the order they reach the communicator.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chorus/tensor.h"
#include "chorus/types.h"
#include "chorus/work.h"

namespace chorus {

namespace detail {
class CommunicatorState;
// Internal: how the runtime itself reaches a communicator's state.
struct CommunicatorAccess;
}  // namespace detail

// A partition of world ranks into groups, e.g. {{0, 1}, {2, 3}}.
using RankList = std::vector<std::vector<int>>;

// While a BlockingCalls lives on a thread, the operations that thread issues are blocking calls:
// one issued while its communicator is idle runs to completion on the calling thread before the
// call returns (its Work is complete; no thread is woken), and one issued while the communicator
// is busy is queued as usual. Use it around code that waits for each operation at once: handing an
// operation to the worker thread and back costs microseconds (more than 10 when the process is
// bound to one core), more than a small collective on one node. Do not issue under it operations
// that must overlap with each other or with the caller's work (e.g. a send whose matching recv this
// thread issues next): they would run one after the other. Scopes nest; each thread has its own.
// A collective on CUDA tensors issued under it runs on the thread's current stream itself rather
// than on the communicator's (chorus/stream.h): nothing to order there and back.
class BlockingCalls {
 public:
  BlockingCalls();
  ~BlockingCalls();
  BlockingCalls(const BlockingCalls&) = delete;
  BlockingCalls& operator=(const BlockingCalls&) = delete;

  // Whether the calling thread is inside one.
  static bool active();
};

class Communicator {
 public:
  using WorkPtr = std::shared_ptr<Work>;

  // Communicators are made by the runtime (DistContext, split) around state it does not show.
  explicit Communicator(std::shared_ptr<detail::CommunicatorState> state);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // Among this communicator's members on this node.
  int localRank() const;
  int localSize() const;
  int worldRank() const;
  int worldSize() const;
  // World rank of this communicator's first member.
  int rootRank() const;
  // Index of this communicator's group in the rank_list that made it, and the number of groups.
  int groupId() const;
  int groupSize() const;
  // The backend that moves the bytes, "auto" resolved: "void", "shm", "tcp", "hierarchical", "mpi"
  // or "mpi_algorithms" (see chorus/dist_context.h).
  std::string backendName() const;

  // Reduces every tensor element-wise across ranks, in place. Several tensors (one dtype) are fused
  // into one operation: packed, reduced once, unpacked.
  WorkPtr allreduce(std::vector<Tensor> tensors, ReduceOp op = ReduceOp::kSum);
  WorkPtr allreduce(Tensor tensor, ReduceOp op = ReduceOp::kSum);
  // Out of place: reads `input` and writes the reduction into `output`, which has the same dtype
  // and number of elements (passing one tensor twice is in place; tensors that partly overlap are
  // an InvalidArgumentError). The backend reads one and writes the other in one pass.
  WorkPtr allreduce(Tensor input, Tensor output, ReduceOp op = ReduceOp::kSum);
  // Concatenates every rank's `input` along `axis` in rank order into `output`, whose extent along
  // `axis` is size() times the input's; all other extents equal. In place: `input` may be block
  // rank() of `output` along axis 0 (as MPI_IN_PLACE, torch's all_gather_into_tensor and NCCL
  // allow); any other overlap is an InvalidArgumentError.
  WorkPtr allgather(Tensor input, Tensor output, int axis = 0);
  // Reduces `input` (numel = size() * output.numel()) across ranks and leaves chunk rank() of the
  // result (in row-major order) in `output`. Input and output share no memory (else
  // InvalidArgumentError), as for gather's and scatter's input and output.
  WorkPtr reduceScatter(Tensor input, Tensor output, ReduceOp op = ReduceOp::kSum);
  // Copies `root`'s tensor into every rank's tensor.
  WorkPtr broadcast(Tensor tensor, int root);
  // Out of place: copies `root`'s `input` into every rank's `output` (the root's too). `input` is
  // read on the root only and may be empty elsewhere; where given, it is checked as on the root,
  // so every rank refuses a bad pair.
  WorkPtr broadcast(Tensor input, Tensor output, int root);
  // Leaves the reduction in `root`'s tensor; other ranks' tensors are not modified.
  WorkPtr reduce(Tensor tensor, int root, ReduceOp op = ReduceOp::kSum);
  // Out of place: reduces every rank's `input` into `root`'s `output`. `input` is never modified;
  // `output` is written on the root only and may be empty elsewhere; where given, it is checked as
  // on the root, so every rank refuses a bad pair.
  WorkPtr reduce(Tensor input, Tensor output, int root, ReduceOp op = ReduceOp::kSum);
  // Concatenates every rank's `input` along `axis` into `output` on `root` (output is not written
  // elsewhere and may be empty there; where given, it is checked as on the root).
  WorkPtr gather(Tensor input, Tensor output, int root, int axis = 0);
  // Splits `root`'s `input` along axis 0 into size() equal chunks and writes chunk r into rank r's
  // `output` (input is not read elsewhere and may be empty there; where given, it is checked as on
  // the root).
  WorkPtr scatter(Tensor input, Tensor output, int root);
  // Splits `input` along `splitAxis` into size() chunks, sends chunk i to rank i, and concatenates
  // what it receives along `concatAxis` in rank order into `output`.
  WorkPtr allToAll(Tensor input, Tensor output, int splitAxis = 0, int concatAxis = 0);
  // all_to_all with a block size per pair (MPI's Alltoallv, torch's all_to_all_single with split
  // sizes). The rows of `input` (its slices along axis 0) go out in rank order, sendSplits[r] rows
  // to rank r; `output` receives recvSplits[r] rows from rank r, in rank order. Each list has
  // size() entries, none negative, adding up to its tensor's dimension 0. input and output have
  // one dtype and one row shape (dimensions 1..) and do not overlap. Rank q's sendSplits[r] must
  // equal rank r's recvSplits[q]: otherwise every rank raises MismatchError naming that pair, and
  // no block is cut or padded. Host tensors only (UnsupportedError for CUDA tensors).
  WorkPtr allToAllV(Tensor input,
                    std::span<const int64_t> sendSplits,
                    Tensor output,
                    std::span<const int64_t> recvSplits);
  // allgather of inputs whose dimension 0 differs (MPI's Allgatherv, Horovod's allgather): every
  // rank's `input` rows land in `output` in rank order, recvSplits[r] rows from rank r (size()
  // entries adding up to output's dimension 0). Rank r's recvSplits[q] must equal rank q's rows
  // (else MismatchError on every rank, naming the pair); dtype, row shape and the rest as for
  // allToAllV.
  WorkPtr allgatherV(Tensor input, Tensor output, std::span<const int64_t> recvSplits);
  // Point-to-point: a send matches the recv with the same (peer, tag) in order. Sizes and dtypes
  // must agree (else MismatchError on both sides). A recv from kAnySource takes a message with its
  // tag from whichever rank; the Work's sourceRank() then says who sent it. As in MPI, a message
  // goes to the earliest issued recv that can take it (naming its sender, or from kAnySource), and
  // one rank's messages arrive in order. Host tensors only (NCCL has no receive from any rank:
  // UnsupportedError), and not on a communicator of one.
  static constexpr int kAnySource = -1;
  WorkPtr send(Tensor tensor, int peer, int tag = 0);
  WorkPtr recv(Tensor tensor, int peer, int tag = 0);
  // Returns once every rank has entered it.
  WorkPtr barrier();

  // Collective: ranks calling with the same color form a new communicator, ordered by (key, rank).
  // A negative color returns nullptr (the rank joins no group). Blocking.
  std::shared_ptr<Communicator> split(int color, int key);
  // Collective over `members` only (MPI_Comm_create_group): the ranks of this communicator listed
  // in `members` form a new communicator, ranked in that order; other ranks take no part and need
  // not call. Every member passes the same `members` and `tag` (a name for the group, such as
  // torch's group name); a member list or tag used again makes a new communicator. The caller must
  // be a member; a rank out of range or listed twice is an InvalidArgumentError. Blocking.
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& members, const std::string& tag);

  // Per-operation deadline (default from DistConfig). Changing it affects operations issued later.
  void setTimeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;

  // Aborts the communicator: pending and later operations fail, peers are told. Never throws.
  void abort() noexcept;
  // The same, with the reason every rank's error quotes ("rank 2 (this process): <reason>").
  // `failedRank` is the world rank of the process whose failure this abort passes on (say, a peer
  // whose PeerError the program let go), which the peers' PeerError::peerRank() then names; -1
  // means this process is the one that failed.
  void abort(const std::string& reason, int failedRank = -1) noexcept;

 private:
  friend struct detail::CommunicatorAccess;

  std::shared_ptr<detail::CommunicatorState> state_;
};

}  // namespace chorus
