// The shm backend ("shm"): collectives among the ranks of one node through shared memory.
//
// Every collective starts with the arrival round of ShmGroup: each rank publishes its call's
// fingerprint (Note [Collective fingerprint]) and waits for every other rank's, then compares
// them all itself, so a mismatch is a MismatchError on every rank at once (naming both ranks and
// the field), whichever path the call takes next. That round is also the whole barrier.
//
// Every collective is native (shm_reducing.cc: allreduce, reduce, reduce_scatter; shm_moving.cc:
// allgather, gather, broadcast, scatter, all_to_all), in one of two shapes:
//  - small (each rank's contribution fits ShmGroup::kSmallSlotBytes): the data travels with the
//    arrival (in the arrival record itself up to ShmGroup::kInlineBytes), and each rank then reads
//    what it needs straight out of its peers' records or small slots. One synchronization per
//    call.
//  - chunked: a pipeline of steps through the double-buffered chunk slots (cache-sized): each rank
//    copies its piece of the step in, and once every rank has, each reads what it needs out of
//    its peers' slots (allreduce and reduce add a step where each rank reduces its 1/p slice).
// Which shape a call takes depends only on fingerprinted fields (count, dtype, group size), so
// every rank takes the same one. send/recv go through the `fallback` backend (chorus's algorithms
// over the shm transport, src/transport/shm/: rings of shared memory per ordered pair).
//
// Each of a collective's group waits calls the call's whileWaiting (Note [Collectives and
// transfers together], runtime/communicator_transfers.cc), which posts the send/recv transfers
// issued meanwhile and polls the fallback's, so a peer's transfer never waits for the
// collective's end.
//
// Failure: any error fails the group (and the fallback), so every rank raises promptly; a rank
// that died (its pid gone) or closed is a PeerError naming it within about 50 ms of a wait.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/options.h"
#include "backend/shm/shm_group.h"
#include "core/function_ref.h"

namespace chorus::backend::shm {

// The row "shm" of the backend table: every member on one node (InvalidArgumentError otherwise).
std::unique_ptr<Backend> createShmBackend(const BackendOptions& options);
// The shm backend among the ranks `options` describes (also the hierarchical backend's node step):
// native collectives over a ShmGroup, send/recv over chorus's algorithms on the shm transport.
// The group's store keys live apart from the transport's.
std::unique_ptr<Backend> createShmBackend(const transport::TransportOptions& options);

class ShmBackend : public Backend {
 public:
  ShmBackend(std::unique_ptr<ShmGroup> group, std::unique_ptr<Backend> fallback);
  ~ShmBackend() override;

  std::string name() const override { return "shm"; }
  bool allreduceAverages() const override { return true; }
  // Every reduction is one reduceMany over all ranks' slots (kernels round half types once).
  bool reducesHalfTypes() const override { return true; }
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

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
  // Point-to-point goes through fallback_, which may post it.
  bool postsPointToPoint() const override { return fallback_->postsPointToPoint(); }
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
  void interruptWait() noexcept override { fallback_->interruptWait(); }
  // The group's sleep, or the fallback's (a collective it runs there).
  void wakeCollective() noexcept override {
    group_->wakeSleepers();
    fallback_->wakeCollective();
  }
  // Transfers go over the fallback; the group's waits call the call's whileWaiting, which polls
  // them (pollTransfers).
  bool collectivesMoveTransfers() const override { return fallback_->collectivesMoveTransfers(); }
  bool pollTransfers() override { return fallback_->pollTransfers(); }
  void abort(std::exception_ptr reason) noexcept override;
  void close() noexcept override;

 private:
  // Runs a transfer's `body`; any failure fails the group and the fallback, then propagates. The
  // front end may post a transfer while a collective waits (its whileWaiting): the group's poll
  // stays the collective's.
  template <typename Body>
  void guardedTransfer(Body&& body) {
    group_->throwIfFailed();
    try {
      body();
    } catch (...) {
      abort(std::current_exception());
      throw;
    }
  }
  // guardedTransfer() for a collective, which forgets the group's poll at its end (set by
  // arrive() for this collective only).
  template <typename Body>
  void guarded(Body&& body) {
    try {
      guardedTransfer(body);
    } catch (...) {
      group_->pollWhileWaiting(nullptr);
      throw;
    }
    group_->pollWhileWaiting(nullptr);
  }
  // Step `i` of a chunked exchange: fill this rank's slot / act on the slots of parity `parity`.
  using FillStep = detail::FunctionRef<void(size_t i, std::byte* slot)>;
  using SlotStep = detail::FunctionRef<void(size_t i, uint64_t parity)>;

  // The arrival round: publishes the fingerprint and `bytes` of `data` (this rank's contribution,
  // possibly none; ShmGroup::arrivalData finds it), waits for every rank, and checks their
  // fingerprints. Returns the collective's number.
  uint64_t arrive(const CallContext& call, const void* data = nullptr, size_t bytes = 0);
  // `steps` steps through the chunk slots: per step, once no rank still reads this rank's slot of
  // that parity, `fill` writes this rank's pieces; once every rank has filled, `reduce` (if any)
  // works in place in this rank's slot, and once every rank has reduced, `drain` reads.
  void exchangeChunks(const CallContext& call,
                      size_t steps,
                      FillStep fill,
                      SlotStep drain,
                      SlotStep reduce = nullptr);
  static size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }
  // Chunked reduction of `count` elements of `input` into `output` on `outputRank` (every rank
  // when kEveryRank); output may alias input.
  static constexpr int kEveryRank = -1;
  static constexpr size_t kCacheLineBytes = 64;
  void reduceChunked(const CallContext& call,
                     const void* input,
                     void* output,
                     size_t count,
                     DataType dtype,
                     ReduceOp op,
                     int outputRank);
  // Each rank's `bytes` of `input` lands in place q (rank q's) of `output` on `reader` (every rank
  // when kEveryRank). input may alias place `rank` of output.
  void gatherBlocks(
      const CallContext& call, const void* input, void* output, size_t bytes, int reader);
  // Block r of `input` on `writer` (every rank when kEveryRank) lands on rank r: in place q of
  // `output` for writer q (every rank), or as the whole output (one writer).
  void scatterBlocks(
      const CallContext& call, const void* input, void* output, size_t bytes, int writer);
  // all_to_all_v's arrival round: publishes this rank's table (see shm_all_to_all_v.cc) and,
  // where it fits, its input; returns the collective's number.
  uint64_t arriveWithSplits(const CallContext& call, const AllToAllVArgs& args);
  // The direct path (ShmGroup::directReads): every rank publishes the address of its `input` in
  // the arrival round, `read(addresses)` copies what this rank needs out of its peers' memory
  // (addresses[q] is rank q's input), and a second round keeps every input in place until all its
  // readers are done.
  using ReadPeers = detail::FunctionRef<void(const std::vector<uintptr_t>& addresses)>;
  void moveDirect(const CallContext& call, const void* input, ReadPeers read);
  // Bytes of each of `pieces` pieces per chunk slot (cache-line multiples).
  size_t pieceBytes(int pieces) const;

  std::unique_ptr<ShmGroup> group_;
  std::unique_ptr<Backend> fallback_;
  uint64_t sequence_ = 0;             // collectives begun
  uint64_t chunkSteps_ = 0;           // chunk steps done (exchangeChunks, reduceChunked)
  std::vector<const void*> sources_;  // scratch: one per rank
  std::vector<uintptr_t> addresses_;  // scratch: one per rank (moveDirect)
};

}  // namespace chorus::backend::shm
