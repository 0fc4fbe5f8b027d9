// What a sub-communicator's errors say about the group they arose in.
//
// Every layer names ranks by their world ranks (Note [One rank numbering], core/rank_names.h), so
// an error needs no translation on its way up. A process may still belong to several groups at
// once (rank_list pools, split()), and its errors say which one failed: the runtime puts
// "in the group of world ranks [2, 5, 7]: " in front of every error of a communicator whose
// members are not the world in world order.
#pragma once

#include <string>
#include <vector>

namespace chorus::detail {

// The prefix for the communicator whose member i is world rank `worldRanks[i]`: empty for the
// world; at most 16 members listed, then "… (N in all)".
std::string groupContext(const std::vector<int>& worldRanks);

}  // namespace chorus::detail
