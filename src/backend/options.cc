// Backend options: see options.h.
#include "backend/options.h"

#include <algorithm>

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend {

transport::TransportOptions transportOptionsOf(const BackendOptions& options,
                                               std::string_view backend,
                                               bool needsStore) {
  if (needsStore && options.store == nullptr) {
    throw UnsupportedError(detail::concat(
        "backend '", backend,
        "' needs a rendezvous store, which this job does not have (started by mpirun: use backend "
        "'mpi' or 'mpi_algorithms', or start the job with chorusrun)"));
  }
  transport::TransportOptions transportOptions;
  transportOptions.rank = options.rank;
  transportOptions.size = options.size;
  transportOptions.names = detail::RankNames(options.worldRanks);  // Note [One rank numbering]
  transportOptions.store = options.store;
  transportOptions.token = options.token;
  transportOptions.scope = options.scope;
  transportOptions.bindHost = options.bindHost;
  transportOptions.deadline = options.deadline;
  if (options.nodeIds.size() <= static_cast<size_t>(options.rank)) {
    transportOptions.ranksOnThisNode = options.oneNode ? options.size : 0;
  } else {
    transportOptions.ranksOnThisNode = static_cast<int>(
        std::count(options.nodeIds.begin(), options.nodeIds.end(), options.nodeIds[options.rank]));
  }
  return transportOptions;
}

}  // namespace chorus::backend
