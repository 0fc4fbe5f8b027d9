// CommunicatorAccess: the runtime's route to the state behind a Communicator, which the public
// header keeps private (Communicator names this struct its friend). Code inside src/runtime that
// runs operations of its own on a communicator (split, the pool's rank_list check) reaches the
// state through here; nothing outside the runtime should.
#pragma once

#include "chorus/communicator.h"

namespace chorus::detail {

struct CommunicatorAccess {
  static CommunicatorState& state(Communicator& comm) { return *comm.state_; }
};

}  // namespace chorus::detail
