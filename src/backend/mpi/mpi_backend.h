// The native MPI backend ("mpi"): each collective is one non-blocking MPI collective on the
// communicator's own MPI communicator (MPI_Iallreduce in place, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibcast, MPI_Ireduce, MPI_Igather, MPI_Iscatter, MPI_Ialltoall(v),
// MPI_Ibarrier; MPI_Isend / MPI_Irecv with the caller's tag), completed by testing it until the
// call's deadline (there is no blocking MPI call with a timeout).
//
// What MPI cannot do natively falls back to chorus's algorithms (backend::AlgorithmicBackend) over
// the MPI transport (src/transport/mpi/): float16 and bfloat16 reductions, bitwise ops on floating
// types, and counts above INT_MAX (the mapping is mpi_types.h; bool reduces natively with MPI's
// logical ops). (avg never arrives here: the front end
// sums and divides.) The fallback's transport is made when the backend is, so every rank makes it
// at the same point.
//
// Mismatched calls (Note [Collective fingerprint]): MPI's collectives carry no fingerprint, so the
// ranks agree on theirs with one small MPI_Iallreduce before each collective (Note [Fingerprints
// over MPI] in mpi_backend.cc); a difference is a MismatchError on every rank, naming the ranks and
// the field. Point-to-point calls are checked by size only (a MismatchError when the sizes differ).
//
// Timeouts name the operation and the ranks that never called it (MpiCensus: stalled ranks tell
// each other which collective they wait in), as over the transports.
//
// Limits:
//  - After a timeout the MPI request cannot be cancelled: the backend is failed and the buffers
//    of that operation may still be written by MPI later.
//  - Creating a group's communicator (MPI_Comm_create_group) has no deadline of its own; it runs
//    right after the split's allgather, which has one (see connector/mpi_comm.h).
//
// Only compiled when CHORUS_WITH_MPI is on.
#pragma once

#include <mpi.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/mpi/mpi_census.h"
#include "core/deadline.h"

namespace chorus::backend::mpi {

class MpiBackend : public Backend {
 public:
  // Takes ownership of `comm` (freed at destruction unless MPI was finalized by then). `fallback`
  // (may be null) runs what MPI cannot; it must span the same ranks. Collective over `comm` (the
  // census's communicator): TimeoutError at `deadline`. Its errors name the ranks by `names`
  // (Note [One rank numbering]).
  MpiBackend(MPI_Comm comm,
             std::unique_ptr<Backend> fallback,
             detail::RankNames names,
             Deadline deadline);
  ~MpiBackend() override;

  std::string name() const override { return "mpi"; }
  stall::Census* census(uint64_t sequence) override {
    census_.begin(sequence);
    return &census_;
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

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
  // MPI_Isend / MPI_Irecv, completed by MPI_Test in waitSome (a transfer past INT_MAX bytes runs
  // whole, through the fallback, when posted).
  bool postsPointToPoint() const override { return true; }
  void postSend(const CallContext& call,
                const void* data,
                size_t bytes,
                int peer,
                int tag,
                Transfer& transfer) override;
  void postRecv(const CallContext& call,
                void* data,
                size_t bytes,
                int peer,
                int tag,
                Transfer& transfer) override;
  bool waitSome(std::span<Transfer* const> transfers, Deadline deadline) override;
  void interruptWait() noexcept override { interrupted_.store(true, std::memory_order_release); }
  // MPI's progress engine moves the posted MPI_Isend / MPI_Irecv while a collective is tested.
  bool collectivesMoveTransfers() const override { return true; }
  // Tests the posted transfers that have a listener, and tells those of the completed ones (a
  // collective that runs amid them: Note [Collectives and transfers together]).
  bool pollTransfers() override {
    notifyCompletedTransfers();
    return false;  // its collectives' waits never sleep
  }
  // A transfer above 2 GiB runs whole (through the fallback): not inside a collective's wait.
  bool postReturnsAtOnce(size_t bytes) const override;
  void wakeCollective() noexcept override {}  // its collectives' waits never sleep
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;

 private:
  // Throws the first failure again, if any.
  void checkUsable();
  // Runs `start` (which posts one MPI request) and completes the request by the deadline; any
  // failure fails the backend. `peer` names the peer of point-to-point calls (-1 otherwise).
  template <typename Start>
  MPI_Status run(const CallContext& call, const char* what, int peer, Start start);
  // The TimeoutError of MPI call `what` (with `peer`, or -1), naming the ranks not arrived.
  TimeoutError timeoutIn(const char* what, int peer);
  TimeoutError timeoutAmong(const char* what, std::vector<int> owing);
  std::vector<int> owingRanks(std::span<Transfer* const> transfers) const;
  // Agrees on the call's fingerprint with the other ranks; MismatchError (on every rank) when
  // their calls differ.
  void checkFingerprints(const CallContext& call);
  // Agrees on an all_to_all_v's block sizes (Note [Splits over MPI]): MismatchError on every rank
  // when a pair disagrees. Returns whether every rank's counts and offsets fit MPI's int.
  bool checkSplits(const CallContext& call, const AllToAllVArgs& args);
  // The algorithmic backend over the MPI transport; UnsupportedError naming `what` without one.
  Backend& fallback(const char* what);
  // A MismatchError (failing the backend) unless a receive of `bytes` from `peer` got that many.
  void checkReceivedBytes(const MPI_Status& status, size_t bytes, int peer, int tag);
  // The MPI tag of point-to-point tag `tag`; InvalidArgumentError when it has none.
  int mpiTag(int tag) const;
  // postSend (`isSend`) or postRecv.
  void post(const CallContext& call,
            void* data,
            size_t bytes,
            int peer,
            int tag,
            Transfer& transfer,
            bool isSend);
  // Tests the posted transfer `transfer` once; true when it is done (then it is forgotten).
  bool testPosted(Transfer& transfer);
  void notifyCompletedTransfers();  // see pollTransfers()

  // A posted transfer's MPI request and what its completion checks.
  struct Posted {
    MPI_Request request = MPI_REQUEST_NULL;
    bool isSend = false;
    size_t bytes = 0;
    int peer = -1;
    int tag = 0;
  };
  std::unordered_map<Transfer*, Posted> posted_;
  std::atomic<bool> interrupted_{false};  // interruptWait() since the last waitSome()

  MPI_Comm comm_ = MPI_COMM_NULL;
  detail::RankNames names_;  // Note [One rank numbering]
  MpiCensus census_;         // names the ranks a stalled collective waits for
  int rank_ = 0;
  int size_ = 1;
  int tagUpperBound_ = 32767;
  std::unique_ptr<Backend> fallback_;
  std::mutex failureMutex_;
  std::exception_ptr failure_;  // guarded by failureMutex_
  std::atomic<bool> failed_{false};
};

}  // namespace chorus::backend::mpi
