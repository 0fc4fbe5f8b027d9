// StoreCensus: the stall inspector's census (Note [Stall inspector], core/stall_watch.h) through
// the communicator's store.
//
// A rank whose collective number `sequence` has stalled sets "chorus/census/<scope>/<rank>" to
// `sequence` (keys only grow: a rank that noted sequence 9 has arrived at every earlier one).
// missing() reads every other rank's key and returns those below `sequence`. Both cost one store
// round trip per key, and happen only in a wait that has already stalled for a second.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/stall_watch.h"
#include "store/store.h"

namespace chorus::detail {

class StoreCensus final : public stall::Census {
 public:
  // Cheap: stores the arguments. `store` must outlive the census.
  StoreCensus(store::Store& store, const std::string& scope, int rank, int size, uint64_t sequence)
      : store_(store), scope_(scope), rank_(rank), size_(size), sequence_(sequence) {}

  void noteArrived() noexcept override;
  std::vector<int> missing() noexcept override;

 private:
  std::string key(int rank) const;

  store::Store& store_;
  const std::string& scope_;
  int rank_;
  int size_;
  uint64_t sequence_;
};

}  // namespace chorus::detail
