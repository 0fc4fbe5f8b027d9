// chorus/dist_context.h — the process's distributed configuration and its communicators.
//
// Contract:
//  - DistContext::get() returns the process-wide context, created on first use from the
//    environment: chorusrun's CHORUS_* variables, else torchrun's RANK / WORLD_SIZE / MASTER_ADDR /
//    MASTER_PORT, else a single rank (void). It is thread-safe.
//  - config() describes this process: rank, size, local_rank, local_size, root_rank and the
//    training switches. The training switches may be changed by the program; the placement fields
//    may not.
//  - communicator(rankList) returns the communicator of the caller's group, creating it on first
//    use (collective: every world rank must call it with the same rankList). An empty rankList
//    means the world. Repeated calls return the cached object.
//  - Backends, by name (DistConfig::backend, CHORUS_BACKEND, setDefaultBackend): "auto" (the
//    default: "shm" when the communicator's ranks share one node, "hierarchical" when they span
//    nodes and some node holds several, "tcp" when each is alone on its node, "mpi" in a job
//    started by mpirun, which has no rendezvous store), "shm" (shared memory, one node only),
//    "tcp" (sockets, any nodes), "hierarchical" (shm inside each node, tcp among one leader per
//    node), "mpi" (the MPI library's own collectives) and "mpi_algorithms" (chorus's algorithms
//    over MPI point-to-point), both only in builds with MPI (CHORUS_WITH_MPI), and "void" (one
//    rank). A communicator of one rank opens no connection, whatever the backend. An unknown name
//    is InvalidArgumentError naming the backends this build has; an MPI name in a build without
//    MPI is UnsupportedError.
//  - shutdown() aborts nothing that is in flight: it waits for pending operations, then closes
//    every communicator and the connection to the store. After shutdown, get() creates a new
//    context.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "chorus/communicator.h"
#include "chorus/key_value_store.h"

namespace chorus {

struct DistConfig {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  // World rank of the first member (0 for the world).
  int rootRank = 0;
  int nodeRank = 0;
  // Training switches.
  bool enableDataParallel = false;
  int zeroOptLevel = 0;
  size_t bucketBytes = 25u << 20;  // CHORUS_BUCKET_MB
  // Per-operation deadline (CHORUS_TIMEOUT, seconds; default 300).
  std::chrono::milliseconds timeout{300'000};
  // "auto", "shm", "tcp", "hierarchical", "mpi", "mpi_algorithms" or "void" (CHORUS_BACKEND);
  // see the contract above.
  std::string backend = "auto";
  // Where this rank's GPU work goes when nothing else says: "cuda:N" or "cpu" (CHORUS_DEVICE;
  // default "cuda:<localRank>", one GPU per local rank). A collective itself runs on its tensors'
  // device; this is the device for the program (and chorus's GPU training) to place them on.
  // With fewer GPUs than local ranks, set CHORUS_DEVICE (e.g. cuda:0 for ranks sharing a GPU).
  std::string device;

  // Reads the environment (see DESIGN §5). Malformed values are InvalidArgumentError.
  static DistConfig fromEnvironment();
  // One "name: value" line per field.
  std::string dumps() const;
};

class DistContext {
 public:
  // The process's context, made (reading the environment) on first use and again after shutdown().
  static DistContext& get();
  // Whether a context is live: get() would return it without making one (reading nothing).
  static bool live();

  const DistConfig& config() const;
  DistConfig& mutableConfig();
  // The caller's communicator for `rankList` (empty: the world) on the default backend, from the
  // pool. Collective the first time a (rankList, backend) pair is asked for: every rank must ask
  // for the same one.
  std::shared_ptr<Communicator> communicator(const RankList& rankList = {});
  // Makes the world, when it is first asked for, rendezvous through `store` (every rank passes
  // the same store) as rank `rank` of `size`, instead of through what the launcher set in the
  // environment: for programs whose launcher gives chorus nothing of its own (torch's Store under
  // torchrun). It does not communicate. Once the world exists, passing the rank and size it has
  // does nothing, and anything else is an InvalidArgumentError.
  void connectThrough(std::shared_ptr<KeyValueStore> store, int rank, int size);
  // Forgets the communicators of `rankList` (not the world's), on every backend: the next
  // communicator(rankList) makes a new one, collectively. Local, but every rank must do it alike
  // (as torch's destroy_process_group(group)), since the next communicator() is collective. What
  // others still hold keeps working until they drop it. The way out of a group that failed for
  // good (a MismatchError ends its communicator).
  void forgetCommunicator(const RankList& rankList);
  // Backend of the communicators asked for from now on: "auto", "shm", "tcp", "hierarchical",
  // "mpi", "mpi_algorithms" or "void" (see the contract above). Those already made keep theirs
  // (and are served again when it is switched back).
  void setDefaultBackend(const std::string& backend);
  // Starts recording a timeline toward `path` (chorus/trace.h) on this rank, after measuring its
  // clock's offset to rank 0's: collective over the world, every rank calls it. Returns false if
  // a trace records already. CHORUS_TRACE=path does this when the world is first made, and
  // writes this rank's part at exit.
  bool startTrace(const std::string& path);
  void shutdown();
  // Aborts every communicator made so far (Communicator::abort(reason)): pending and later
  // operations fail here, and peers fail promptly with a PeerError quoting `reason`. For a program
  // that is about to die (the Python front end calls it on an uncaught exception). `failedRank`
  // as for Communicator::abort. Never throws.
  void abort(const std::string& reason, int failedRank = -1) noexcept;

  ~DistContext();

 private:
  DistContext();
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace chorus
