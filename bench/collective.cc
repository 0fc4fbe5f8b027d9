// The table of collectives chorus-bench knows (see collective.h); the rows live in
// reducing_collectives.cc and moving_collectives.cc.
#include "collective.h"

#include <array>
#include <string>

#include "point_to_point.h"
#include "uneven_collectives.h"

namespace chorus::bench {
namespace {

// Pointers, not copies, so the table does not depend on other files' initialization order.
const std::array<const Collective*, 11> kCollectives = {
    &kAllreduce, &kAllgather, &kReduceScatter, &kBroadcast, &kReduce,  &kAlltoall,
    &kAlltoallv, &kGather,    &kScatter,       &kSendrecv,  &kBarrier,
};

struct Alias {
  std::string_view alias;
  std::string_view name;
};
constexpr Alias kAliases[] = {
    {"all_reduce", "allreduce"},         {"all_gather", "allgather"},
    {"reducescatter", "reduce_scatter"}, {"reduce-scatter", "reduce_scatter"},
    {"all_to_all", "alltoall"},          {"bcast", "broadcast"},
    {"all_to_all_v", "alltoallv"},       {"send_recv", "sendrecv"},
};

}  // namespace

std::span<const Collective* const> allCollectives() { return kCollectives; }

const Collective* findCollective(std::string_view name) {
  for (const Alias& alias : kAliases) {
    if (name == alias.alias) {
      name = alias.name;
    }
  }
  for (const Collective* collective : kCollectives) {
    if (collective->name == name) {
      return collective;
    }
  }
  return nullptr;
}

}  // namespace chorus::bench
