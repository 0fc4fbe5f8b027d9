// NCCL's unique id through the store: see nccl_bootstrap.h.
#include "backend/nccl/nccl_bootstrap.h"

#include <cstring>

#include "backend/nccl/nccl_status.h"
#include "chorus/error.h"
#include "core/check.h"

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

}  // namespace chorus::backend::nccl
