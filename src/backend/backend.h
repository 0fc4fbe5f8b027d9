// Backend: an engine that runs whole collectives for one communicator.
//
// Kinds (one row each in the backend table, factory.cc): "void" (size 1, identity), algorithmic
// (the algorithms of src/algorithms/ over a transport: "tcp", or "mpi_algorithms" over MPI
// point-to-point), "shm" (native shared-memory collectives), "hierarchical" (shm inside nodes,
// tcp among one leader per node), "mpi" (native MPI collectives; builds with CHORUS_WITH_MPI),
// "nccl" (CUDA tensors through NCCL; builds with CHORUS_WITH_NCCL; its GPU side is a
// DeviceBackend, device_backend.h).
// Backends depend on core and transports only; their arguments are core's (collective_args.h).
// The communicator front end (src/runtime/) validates, flattens tensors, widens float16/bfloat16,
// turns avg into sum-then-divide (unless the backend's allreduce averages itself) and fuses tensor
// lists before calling a backend, so a backend sees flat buffers only.
//
// Contract: methods are called from one thread at a time, in the communicator's call order. Each
// call finishes or throws a chorus::Error before `call.deadline`. After a throw the backend is
// failed and every later call throws again; abort(), close() and interruptWait() may be called
// from any thread.
//
// Point-to-point comes in two forms. send/recv run a transfer whole. A backend whose
// postsPointToPoint() is true also lets the front end overlap them (Note [Point-to-point
// overlap], runtime/communicator_state.h): postSend/postRecv start a transfer and return at once;
// waitSome() waits until one of the given transfers is done (true) or interruptWait() was called
// (false); the semantics and failures are Transport::waitSome's (transport.h). Transfers of one
// (peer, tag) match in the order they were posted. postRecv's peer may be transport::kAnyPeer (a
// receive from any rank, matched by MPI's rule, as the transport contract says): once done, the
// Transfer's request.peer names the sender. send/recv, and postSend, always name their peer.
//
// A backend whose collectivesMoveTransfers() is true may run a collective while posted transfers
// are in flight, and post more while it runs (Note [Collectives and transfers together],
// runtime/communicator_transfers.cc): they keep moving while the collective waits, so neither
// waits for the other. For that the front end gives the collective a CallContext::whileWaiting,
// which every wait of the collective calls (the steps' waits too, where a backend runs steps on
// others) with no lock of the backend held: it may post transfers on this backend and call
// pollTransfers().
#pragma once

#include <exception>
#include <memory>
#include <span>
#include <string>

#include "core/check.h"
#include "core/collective.h"
#include "core/collective_args.h"
#include "core/deadline.h"
#include "core/function_ref.h"
#include "core/stall_watch.h"
#include "trace/recorder.h"
#include "transport/transport.h"

namespace chorus::backend {

class DeviceBackend;

struct CallContext {
  Fingerprint fingerprint;
  Deadline deadline;
  // The operation's records, where a backend notes when it saw every peer arrive
  // (trace::noteAllArrived; Note [Timeline]); null when the caller records none.
  const trace::Ticket* record = nullptr;
  // When set, every wait of this collective calls it, with no lock of the backend held: the front
  // end's transfers go on meanwhile (see the contract above). While it returns true (transfers in
  // flight that the wait may not see move), the wait calls it at least once a millisecond; a
  // transfer issued meanwhile wakes the wait (wakeCollective).
  detail::FunctionRef<bool()> whileWaiting = nullptr;
};

// Told when a posted transfer's bytes have all moved, while a collective runs amid it
// (Transfer::request.listener; Note [Collectives and transfers together]): the transport's
// contract.
using TransferListener = transport::CompletionListener;

// A posted point-to-point transfer. Its address must stay the same until it is done.
struct Transfer {
  transport::Request request;
  bool done() const { return request.done; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The census of collective `sequence` (Note [Stall inspector]) where the backend keeps one of
  // its own, for communicators without a store (backend mpi: MpiCensus); null otherwise. The
  // pointer stays valid while the backend lives.
  virtual stall::Census* census(uint64_t /*sequence*/) { return nullptr; }
  // The GPU side of a backend that runs collectives on device memory (device_backend.h): the nccl
  // backend returns itself; host backends null. Valid while the backend lives.
  virtual DeviceBackend* deviceBackend() { return nullptr; }

  virtual void allreduce(const CallContext& call, const AllreduceArgs& args) = 0;
  // True when allreduce() takes ReduceOp::kAvg itself (divides by size() inside the reduction,
  // where the data is in cache); otherwise the front end sends kSum and divides afterwards, an
  // extra pass over the whole buffer.
  virtual bool allreduceAverages() const { return false; }
  // True when the reductions (allreduce, reduce, reduceScatter) take float16 and bfloat16 as they
  // are and accumulate them in float32, rounding once per element (a single reduceMany over every
  // rank's contribution): the front end then sends them unwidened, half the bytes. Otherwise it
  // widens them to float32 first and narrows the result.
  virtual bool reducesHalfTypes() const { return false; }
  virtual void reduceScatter(const CallContext& call, const ReduceScatterArgs& args) = 0;
  virtual void allgather(const CallContext& call, const AllgatherArgs& args) = 0;
  virtual void broadcast(const CallContext& call, const BroadcastArgs& args) = 0;
  virtual void reduce(const CallContext& call, const ReduceArgs& args) = 0;
  virtual void gather(const CallContext& call, const GatherArgs& args) = 0;
  virtual void scatter(const CallContext& call, const ScatterArgs& args) = 0;
  virtual void allToAll(const CallContext& call, const AllToAllArgs& args) = 0;
  // Uneven all_to_all. Besides the fingerprint, the backend checks every pair, this rank's own
  // too (rank q's sendBytes[r] against rank r's recvBytes[q]), before any block moves, so that a
  // disagreement is the same MismatchError (makeSplitMismatchError) on every rank of the call,
  // never a cut or padded block. (A transport's size check on a receive is not enough: it fails
  // the receiver, while the sender may have finished.)
  virtual void allToAllV(const CallContext& call, const AllToAllVArgs& args) = 0;
  virtual void barrier(const CallContext& call) = 0;
  virtual void send(const CallContext& call, const void* data, size_t bytes, int peer, int tag) = 0;
  virtual void recv(const CallContext& call, void* data, size_t bytes, int peer, int tag) = 0;

  // Overlapping point-to-point (see the contract above); the defaults serve backends that run
  // send/recv whole, whose postsPointToPoint() is false, so the front end never calls the others.
  virtual bool postsPointToPoint() const { return false; }
  virtual void postSend(const CallContext& /*call*/,
                        const void* /*data*/,
                        size_t /*bytes*/,
                        int /*peer*/,
                        int /*tag*/,
                        Transfer& /*transfer*/) {
    CHORUS_ASSERT(!"postSend on a backend that does not post point-to-point");
  }
  virtual void postRecv(const CallContext& /*call*/,
                        void* /*data*/,
                        size_t /*bytes*/,
                        int /*peer*/,
                        int /*tag*/,
                        Transfer& /*transfer*/) {
    CHORUS_ASSERT(!"postRecv on a backend that does not post point-to-point");
  }
  virtual bool waitSome(std::span<Transfer* const> /*transfers*/, Deadline /*deadline*/) {
    CHORUS_ASSERT(!"waitSome on a backend that does not post point-to-point");
    return false;
  }
  virtual void interruptWait() noexcept {}
  // Whether a collective may run while posted transfers are in flight, and keeps them moving
  // (see the contract above). False: a collective waits until every earlier transfer is done.
  virtual bool collectivesMoveTransfers() const { return false; }
  // Moves posted transfers along without waiting (Transport::poll) and tells the listeners of
  // those done, for a collective's waits on something else (shm: its group's; hierarchical: its
  // node and leaders steps'; mpi: MPI's own). Returns whether it must be called again soon (the
  // waits see nothing of these transfers move); a no-op, false, where the running collective's
  // waits move them already.
  virtual bool pollTransfers() { return false; }
  // Whether postSend/postRecv of `bytes` return at once (the mpi backend runs a transfer above 2
  // GiB whole), so that a collective's whileWaiting may post it.
  virtual bool postReturnsAtOnce(size_t /*bytes*/) const { return true; }
  // A transfer was issued while a collective runs: make the collective's waits call its
  // whileWaiting soon, sleeping or not (Transport::wake). Any thread. The default does nothing:
  // a backend whose collectives' waits never sleep.
  virtual void wakeCollective() noexcept {}

  // See Transport::abort / close.
  virtual void abort(std::exception_ptr reason) noexcept = 0;
  virtual void close() noexcept = 0;
};

}  // namespace chorus::backend
