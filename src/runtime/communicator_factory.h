// Creating communicators: the world communicator of a job, and groups carved out of an existing
// communicator (split, rank_list).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "runtime/communicator_state.h"
#include "store/store.h"

namespace chorus::detail {

struct WorldOptions {
  int rank = 0;
  int size = 1;
  // Identity of this rank's node; ranks with equal ids count as local to each other.
  std::string nodeId = "node0";
  // Every rank's node id in rank order when the connector knows them (MPI); empty: exchanged
  // through the store.
  std::vector<std::string> nodeIds;
  // The job's store (unscoped; null for size 1 and under the MPI connector) and its token.
  std::shared_ptr<store::Store> store;
  std::string token;
  std::string backend = "auto";
  std::string bindHost = "127.0.0.1";
  // The transport of the hierarchical backend among nodes: "tcp", or "mpi" under mpirun.
  std::string interNodeTransport = "tcp";
  std::chrono::milliseconds timeout{300'000};
  // Distinguishes several worlds sharing one store (tests); identical on all ranks.
  std::string scope = "world";
};

// Collective over all ranks: exchanges node ids, connects the backend.
std::shared_ptr<Communicator> createWorldCommunicator(const WorldOptions& options);

// Collective over `members` (ranks of `parent`, in the new communicator's rank order), which must
// include the caller; other ranks of the parent do not take part. `scope` must be unique and equal
// on all members.
std::shared_ptr<Communicator> createGroupCommunicator(CommunicatorState& parent,
                                                      const std::vector<int>& members,
                                                      int groupId,
                                                      int groupSize,
                                                      const std::string& scope,
                                                      const std::string& backend);

// Communicator::split with the new communicators on `backend` (split itself keeps the parent's).
std::shared_ptr<Communicator> splitCommunicator(Communicator& parent,
                                                int color,
                                                int key,
                                                const std::string& backend);

// Local rank and size among `nodeIds` for member `rank`.
std::pair<int, int> localPlacement(const std::vector<std::string>& nodeIds, int rank);

}  // namespace chorus::detail
