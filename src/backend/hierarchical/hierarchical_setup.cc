// Making the hierarchical backend (see hierarchical_backend.h): its three sub-backends, each over
// its own part of the communicator's store and handshake scope. The leaders and the flat fallback
// run over options.interNodeTransport: tcp, or MPI in a job started by mpirun (whose
// communicators those transports make from the members' world ranks, needing no store).
#include <numeric>

#include "backend/algorithmic_backend.h"
#include "backend/hierarchical/hierarchical_backend.h"
#include "backend/shm/shm_backend.h"
#include "core/check.h"
#include "core/logging.h"
#include "store/prefix_store.h"

namespace chorus::backend::hierarchical {
namespace {

// `options` narrowed to the sub-group of `members` (ranks of `options`), of which this rank is
// member `rank`, with its own store scope and handshake scope named `part`.
transport::TransportOptions subGroup(const transport::TransportOptions& options,
                                     const std::string& part,
                                     int rank,
                                     const std::vector<int>& members) {
  transport::TransportOptions narrowed = options;
  narrowed.rank = rank;
  narrowed.size = static_cast<int>(members.size());
  narrowed.names = options.names.subset(members);
  narrowed.store = std::make_shared<store::PrefixStore>(part, options.store);
  narrowed.scope = options.scope + "/" + part;
  return narrowed;
}

}  // namespace

std::unique_ptr<Backend> createHierarchicalBackend(const BackendOptions& options) {
  const transport::TransportOptions whole = transportOptionsOf(options, "hierarchical");
  CHORUS_CHECK_ARG(static_cast<int>(options.nodeIds.size()) == options.size, "rank ",
                   whole.names(options.rank),
                   ": backend 'hierarchical' needs the node of each of the ", options.size,
                   " members, got ", options.nodeIds.size());
  auto layout = nodeLayout(options.nodeIds, options.rank);
  std::vector<int> everyone(options.size);
  std::iota(everyone.begin(), everyone.end(), 0);
  const std::string& between = options.interNodeTransport;
  auto flat = std::make_unique<AlgorithmicBackend>(
      transport::createTransport(between, subGroup(whole, "flat", options.rank, everyone)));
  std::unique_ptr<Backend> local;
  const int localSize = static_cast<int>(layout.nodeMembers.size());
  if (localSize > 1) {
    local = shm::createShmBackend(subGroup(whole, detail::concat("node", layout.nodeMembers[0]),
                                           layout.localRank, layout.nodeMembers));
  }
  std::unique_ptr<Backend> leaders;
  const int nodes = static_cast<int>(layout.leaders.size());
  if (layout.isLeader() && nodes > 1 && nodes < options.size) {
    leaders = std::make_unique<AlgorithmicBackend>(transport::createTransport(
        between, subGroup(whole, "leaders", layout.nodeIndex, layout.leaders)));
  }
  CHORUS_LOG(kInfo) << "hierarchical backend of " << options.size << " ranks: shm inside each of "
                    << nodes << " nodes, " << between << " among their leaders";
  return std::make_unique<HierarchicalBackend>(std::move(layout), whole.names, std::move(local),
                                               std::move(leaders), std::move(flat));
}

}  // namespace chorus::backend::hierarchical
