// Parameterizing algorithm tests by table row and group size, so every row of every table is
// exercised (a row added to a table is tested without touching the tests).
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"

namespace chorus::algorithms::testing {

// Group sizes every algorithm is tested at: 1, powers of two, and not.
inline const std::vector<int> kGroupSizes = {1, 2, 3, 4, 7, 8};

template <typename Args>
std::vector<std::string> namesOf(std::span<const AlgorithmInfo<Args>> table) {
  std::vector<std::string> names;
  for (const auto& row : table) names.emplace_back(row.name);
  return names;
}

template <typename Args>
const AlgorithmInfo<Args>& rowNamed(std::span<const AlgorithmInfo<Args>> table,
                                    const std::string& name) {
  for (const auto& row : table) {
    if (row.name == name)
      return row;
  }
  throw std::logic_error("no row named " + name);
}

using RowAndSize = std::tuple<std::string, int>;

inline std::string rowAndSizeName(const ::testing::TestParamInfo<RowAndSize>& info) {
  return std::get<0>(info.param) + "_p" + std::to_string(std::get<1>(info.param));
}

// Distinct roots to test on a group: first, middle, last.
inline std::vector<int> testRoots(int size) {
  std::vector<int> roots = {0};
  if (size / 2 != 0)
    roots.push_back(size / 2);
  if (size - 1 != 0 && size - 1 != size / 2)
    roots.push_back(size - 1);
  return roots;
}

}  // namespace chorus::algorithms::testing
