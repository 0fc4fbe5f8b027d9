// Making transports by name. Adding a transport is one folder, one row in registry.cc, one build
// option.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/deadline.h"
#include "core/rank_names.h"
#include "store/store.h"
#include "transport/transport.h"

namespace chorus::transport {

struct TransportOptions {
  int rank = 0;
  int size = 1;
  // The members' world ranks, by which every error of the transport names them (Note [One rank
  // numbering]); empty for the world communicator.
  detail::RankNames names;
  // The store through which the ranks exchange addresses, already scoped to this communicator
  // (a PrefixStore), so keys like "addr/3" do not collide.
  std::shared_ptr<store::Store> store;
  // Job token for Note [Authenticated handshake], and a name for this transport's scope
  // (used as the handshake purpose, so a connection meant for one communicator cannot join
  // another).
  std::string token;
  std::string scope;
  // The address to listen on; peers connect to it. "127.0.0.1" for a single node.
  std::string bindHost = "127.0.0.1";
  // Connection setup must finish by then (TimeoutError naming the ranks not connected).
  Deadline deadline = Deadline::never();
  // shm: whether this rank may read its peers' memory (process_vm_readv), as its creator already
  // found out (the shm backend's ShmGroup probes every pair); unset, the transport probes itself.
  // (A probe here, after the backend's, was followed by 5x slower streamed messages in about one
  // run in three on the 2-core VM; a transport made without one never showed it.)
  std::optional<bool> peersReadable;
  // How many of the communicator's ranks run on this node (0: unknown). With more of them than
  // cores, a tcp wait sleeps at once instead of polling first (Note [Polling before sleeping]).
  int ranksOnThisNode = 0;
};

// "tcp" (any nodes), "shm" (ranks of one node) or "mpi" (jobs started by mpirun; the store is not
// used). Unknown names are InvalidArgumentError listing the ones this build has; "mpi" in a build
// without MPI is UnsupportedError. Blocks until every pair of ranks is connected (and, over tcp,
// authenticated); collective over options.store (over MPI for "mpi"). With CHORUS_FAULT_DELAY_MS
// set (tests only), the transport is wrapped in a FaultyTransport that delays each message
// (faulty::faultFromEnvironment).
std::unique_ptr<Transport> createTransport(std::string_view name, const TransportOptions& options);

}  // namespace chorus::transport
