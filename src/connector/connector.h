// Connector: how this process learns its place in the job (rank, size, local rank and size, node)
// and reaches the other processes before any communicator exists.
//
// Kinds:
//  - "store": launched by chorusrun (CHORUS_RANK, CHORUS_SIZE, CHORUS_LOCAL_RANK,
//    CHORUS_LOCAL_SIZE, CHORUS_NODE_RANK, CHORUS_STORE, CHORUS_JOB_TOKEN) or torchrun-style
//    (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 then serves
//    the store itself). Rendezvous goes through the TCP store.
//    Under srun (Note [Slurm bootstrap], slurm.h) the placement comes from SLURM_* and rank 0
//    serves the store on the first host of the job's node list; the kind is "store" too.
//  - "mpi": launched by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set, CHORUS_STORE not
//    set) in a build with CHORUS_WITH_MPI. Rendezvous goes through MPI; a store exists only after
//    startStore() (one node only).
//  - "void": no launcher; a single rank.
//
// Contract: barrier() and broadcast() are collective over all ranks of the job and give up at
// `deadline` with TimeoutError. Calls must be made in the same order on every rank. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "store/store.h"

namespace chorus::connector {

class Connector {
 public:
  virtual ~Connector() = default;

  virtual std::string kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
  virtual int nodeRank() const = 0;
  // Identity of this node: "node<rank>" when the launcher assigns node ranks, else the host name.
  virtual std::string nodeId() const = 0;
  // Node ids of all ranks in rank order when the connector knows them without a store (MPI);
  // empty otherwise (they are then exchanged through the store).
  virtual std::vector<std::string> nodeIds() const { return {}; }
  // The job's rendezvous store (null for void and MPI) and the token that authenticates
  // connections.
  virtual std::shared_ptr<store::Store> store() const = 0;
  virtual const std::string& token() const = 0;
  // The address on which other ranks can reach this process.
  virtual std::string hostAddress() const = 0;

  // Makes store() non-null where the connector can (MPI: rank 0 serves one on loopback when the
  // whole job is on one node), so that store-based backends (shm, tcp) work there too. Collective;
  // a no-op for connectors that always have a store (or never can).
  virtual void startStore(Deadline /*deadline*/) {}
  virtual void barrier(Deadline deadline) = 0;
  // Returns root's `bytes` on every rank.
  virtual store::Bytes broadcast(const store::Bytes& bytes, int root, Deadline deadline) = 0;
};

// Chooses the connector from the environment (see above). Malformed variables are
// InvalidArgumentError naming the variable. Connecting waits at most `timeout`.
std::unique_ptr<Connector> connectFromEnvironment(std::chrono::milliseconds timeout);

// A job whose rendezvous store is the program's own (DistContext::connectThrough: torch's Store
// under torchrun): this process is `rank` of `size`; ranks share node ids through the store, and
// rank 0 draws the token that authenticates their connections and publishes it there. Listeners
// bind to CHORUS_BIND_ADDR / CHORUS_IFNAME where set, else to loopback (one node).
std::unique_ptr<Connector> connectThrough(std::shared_ptr<store::Store> store,
                                          int rank,
                                          int size,
                                          std::chrono::milliseconds timeout);

}  // namespace chorus::connector
