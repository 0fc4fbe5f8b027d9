// Making an nccl backend: see nccl_setup.h.
#include "backend/nccl/nccl_setup.h"

#include "backend/nccl/cuda_device.h"
#include "backend/nccl/nccl_backend.h"
#include "backend/nccl/nccl_bootstrap.h"
#include "backend/nccl/nccl_status.h"
#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend::nccl {

bool available() { return true; }

std::unique_ptr<Backend> createNcclBackend(const BackendOptions& options) {
  const auto worldRankOf = [&](int rank) {
    return options.worldRanks.empty() ? rank : options.worldRanks[rank];
  };
  const int me = worldRankOf(options.rank);
  requireDevice(options.device, me, "backend 'nccl'");
  ncclUniqueId id{};
  if (options.size == 1) {
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", me);  // nobody to share it with
  } else {
    const UniqueIdExchange exchange{.store = options.store.get(),
                                    .key = "nccl/unique_id",
                                    .rank = options.rank,
                                    .worldRank = me,
                                    .rootWorldRank = worldRankOf(0),
                                    .deadline = options.deadline};
    if (options.store != nullptr) {
      id = shareUniqueId(exchange);
    } else {  // mpirun: the members' MPI communicator carries it
      std::vector<int> worldRanks;
      for (int rank = 0; rank < options.size; ++rank) worldRanks.push_back(worldRankOf(rank));
      id = shareUniqueIdOverMpi(exchange, worldRanks, options.scope);
    }
  }
  auto comm = NcclCommunicator::create(id, {.rank = options.rank,
                                            .size = options.size,
                                            .device = options.device,
                                            .worldRank = me,
                                            .name = "chorus:" + options.scope,
                                            .deadline = options.deadline});
  return std::make_unique<NcclBackend>(std::move(comm), options.worldRanks);
}

}  // namespace chorus::backend::nccl
