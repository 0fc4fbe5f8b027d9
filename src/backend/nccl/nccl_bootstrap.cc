// NCCL's unique id through the store or MPI: see nccl_bootstrap.h.
#include "backend/nccl/nccl_bootstrap.h"

#include <cstring>

#include "backend/nccl/nccl_status.h"
#include "chorus/error.h"
#include "core/check.h"

#ifdef CHORUS_WITH_MPI
#include "connector/mpi_comm.h"
#include "connector/mpi_environment.h"
#endif

namespace chorus::backend::nccl {

ncclUniqueId shareUniqueId(const UniqueIdExchange& exchange) {
  CHORUS_ASSERT(exchange.store != nullptr);
  ncclUniqueId id{};
  if (exchange.rank == 0) {
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", exchange.worldRank);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    exchange.store->set(exchange.key, store::Bytes(bytes, bytes + sizeof(id)));
    return id;
  }
  store::Bytes value;
  try {
    value = exchange.store->get(exchange.key, exchange.deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(
        detail::concat("rank ", exchange.worldRank, " (this process): the nccl backend waited for ",
                       "rank ", exchange.rootWorldRank,
                       " to publish NCCL's unique id, in vain; did every rank of the group make ",
                       "its first CUDA call? (", e.what(), ")"),
        {exchange.rootWorldRank});
  }
  if (value.size() != sizeof(id)) {
    throw InternalError(detail::concat("internal: rank ", exchange.worldRank,
                                       " (this process) read an NCCL unique id of ", value.size(),
                                       " bytes from the store, not ", sizeof(id)));
  }
  std::memcpy(&id, value.data(), sizeof(id));
  return id;
}

ncclUniqueId shareUniqueIdOverMpi(const UniqueIdExchange& exchange,
                                  const std::vector<int>& worldRanks,
                                  const std::string& scope) {
#ifdef CHORUS_WITH_MPI
  ncclUniqueId id{};
  if (exchange.rank == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", exchange.worldRank);
  MPI_Comm comm = connector::createMpiComm(worldRanks, scope + "/nccl", exchange.deadline);
  try {
    MPI_Request request = MPI_REQUEST_NULL;
    connector::checkMpi(MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, comm, &request), "MPI_Ibcast",
                        exchange.worldRank);
    connector::waitMpiRequest(
        request, exchange.deadline,
        detail::concat("rank ", exchange.worldRank, " (this process): the nccl backend waited ",
                       "for rank ", exchange.rootWorldRank, "'s NCCL unique id over MPI, in vain; ",
                       "did every rank of the group make its first CUDA call?"));
  } catch (...) {
    MPI_Comm_free(&comm);
    throw;
  }
  MPI_Comm_free(&comm);
  return id;
#else
  (void)worldRanks;
  (void)scope;
  throw UnsupportedError(detail::concat(
      "rank ", exchange.worldRank,
      " (this process): backend 'nccl' finds its members through chorusrun's store or through "
      "MPI; this job has no store and this chorus no MPI (CHORUS_WITH_MPI): start it with "
      "chorusrun"));
#endif
}

}  // namespace chorus::backend::nccl
