// The rank_list tables that the groups tests check, written out literally (DESIGN §4 seeds), and
// the completion of a rank_list into a partition (unlisted ranks stand alone), done independently
// of the runtime so that the tests do not check the code against itself.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

// Seed grouping table on 4 ranks: rank r holds r + 1; allreduce(sum) within rank_list's groups.
struct SeedRow {
  RankList rankList;  // empty: no rank_list (the world)
  std::array<int, 4> sums;
};

inline const std::vector<SeedRow>& seedTable() {
  static const std::vector<SeedRow> rows = {
      {{}, {10, 10, 10, 10}},           {{{0, 1, 2, 3}}, {10, 10, 10, 10}},
      {{{0, 1}, {2, 3}}, {3, 3, 7, 7}}, {{{0, 1, 2}, {3}}, {6, 6, 6, 4}},
      {{{0, 1, 2}}, {6, 6, 6, 4}},  // rank 3 in no group: standalone
  };
  return rows;
}

// Attribute table for rank_list {{1, 2, 3}, {0}} on 2 nodes x 2 ranks (node 0 = ranks 0, 1).
struct Attributes {
  int rank, size, localRank, localSize, groupId, groupSize;
  bool operator==(const Attributes&) const = default;
};

inline const RankList kAttributeRankList = {{1, 2, 3}, {0}};

inline const std::array<Attributes, 4> kTwoNodeAttributes = {{
    {0, 1, 0, 1, 1, 2},
    {0, 3, 0, 1, 0, 2},
    {1, 3, 0, 2, 0, 2},
    {2, 3, 1, 2, 0, 2},
}};

// The same rank_list with every rank on one node: the local columns equal the sub columns.
inline const std::array<Attributes, 4> kOneNodeAttributes = {{
    {0, 1, 0, 1, 1, 2},
    {0, 3, 0, 3, 0, 2},
    {1, 3, 1, 3, 0, 2},
    {2, 3, 2, 3, 0, 2},
}};

inline std::string toString(const Attributes& a) {
  return std::to_string(a.rank) + "/" + std::to_string(a.size) + " | " +
         std::to_string(a.localRank) + "/" + std::to_string(a.localSize) + " | " +
         std::to_string(a.groupId) + "/" + std::to_string(a.groupSize);
}

inline std::string toString(const RankList& rankList) {
  if (rankList.empty())
    return "(world)";
  std::string text = "[";
  for (size_t g = 0; g < rankList.size(); ++g) {
    text += g ? ",[" : "[";
    for (size_t i = 0; i < rankList[g].size(); ++i)
      text += (i ? "," : "") + std::to_string(rankList[g][i]);
    text += "]";
  }
  return text + "]";
}

// The members (in group order) of world rank `rank`'s group; unlisted ranks stand alone.
inline std::vector<int> groupOf(const RankList& rankList, int worldSize, int rank) {
  if (rankList.empty()) {
    std::vector<int> all(worldSize);
    for (int r = 0; r < worldSize; ++r) all[r] = r;
    return all;
  }
  for (const auto& group : rankList) {
    if (std::find(group.begin(), group.end(), rank) != group.end())
      return group;
  }
  return {rank};
}

}  // namespace chorus::testing
