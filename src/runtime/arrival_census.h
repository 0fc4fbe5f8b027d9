// StoreCensus: the stall inspector's census (Note [Stall inspector], core/stall_watch.h) through
// the communicator's store.
//
// A rank whose collective number `sequence` has stalled sets "chorus/census/<scope>/<rank>" to
// `sequence` (keys only grow: a rank that noted sequence 9 has arrived at every earlier one).
// missing() reads every other rank's key and returns those below `sequence`: one store round trip
// per rank, only for a stall warning or a TimeoutError.
//
// Agreement (Note [Census agreement], core/stall_watch.h): the note also sets
// "chorus/census/<scope>/call/<rank>" to this rank's fingerprint, then adds one to
// ".../calls/<sequence>/<hash of the fingerprint>" and then to ".../calls/<sequence>" (how many
// ranks noted this collective). checkAgreement() reads the total first and this rank's hash's
// count second: since every rank counts its hash before the total, a total above the count means
// some rank noted another call, whose fingerprint is then looked up to name it. Two round trips a
// check, whatever the number of ranks; the notes cost five. All of it happens only in a wait that
// has already stalled for a second.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "core/rank_names.h"
#include "core/stall_watch.h"
#include "store/store.h"

namespace chorus::detail {

class StoreCensus final : public stall::Census {
 public:
  // Cheap: stores the arguments. `store`, `names` and `fingerprint` (this rank's call, whose
  // sequence number is the collective's) must outlive the census. Ranks are named by `names`
  // (Note [One rank numbering]).
  StoreCensus(store::Store& store,
              const std::string& scope,
              int rank,
              int size,
              const RankNames& names,
              const Fingerprint& fingerprint)
      : store_(store),
        scope_(scope),
        rank_(rank),
        size_(size),
        names_(names),
        sequence_(fingerprint.sequence),
        fingerprint_(fingerprint) {}

  void noteArrived() noexcept override;
  std::vector<int> missing() noexcept override;
  void checkAgreement() override;

 private:
  std::string key(int rank) const;
  std::string callKey(int rank) const;
  std::string callCountKey(bool thisCall) const;
  // The rank whose noted call at this collective differs from this rank's, and its fingerprint.
  std::optional<std::pair<int, Fingerprint>> findDifferentCall();

  store::Store& store_;
  const std::string& scope_;
  int rank_;
  int size_;
  const RankNames& names_;
  uint64_t sequence_;
  const Fingerprint& fingerprint_;
};

}  // namespace chorus::detail
