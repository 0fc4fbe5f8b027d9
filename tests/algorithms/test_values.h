// Closed-form data for algorithm tests: what each rank contributes and what a reduction over p
// ranks must give, element by element, for any dtype; and byte patterns for untyped collectives.
//
//   sum:  rank r gives (r+1) * (i%13 + 1)      -> (i%13 + 1) * p(p+1)/2
//   max:  rank r gives i%13 + r                 -> i%13 + p - 1
//   min:  rank r gives i%13 + r                 -> i%13
//   prod: rank r gives 1 + (i + r) % 2          -> 2^(number of r < p with i + r odd)
//
// Values stay small integers, so they are exact in every dtype tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/types.h"

namespace chorus::algorithms::testing {

struct Reduction {
  DataType dtype;
  ReduceOp op;
};

// The (dtype, op) pairs every reducing collective is tested with.
const std::vector<Reduction>& testReductions();

double contribution(ReduceOp op, int rank, size_t index);
double expectedReduction(ReduceOp op, int size, size_t index);

void storeValue(DataType dtype, void* base, size_t index, double value);
double loadValue(DataType dtype, const void* base, size_t index);

// Fills elements [0, count) of `data` with rank's contribution at indices first .. first+count-1.
void fillContribution(
    const Reduction& reduction, int rank, void* data, size_t count, size_t first = 0);
// "" when elements [0, count) equal the closed form at indices first.., else the first difference.
std::string checkReduction(
    const Reduction& reduction, int size, const void* data, size_t count, size_t first = 0);

// Byte j of block `block` in the untyped collectives' test data.
inline uint8_t patternByte(size_t block, size_t j) {
  return static_cast<uint8_t>(block * 31 + j * 7 + 3);
}
void fillPattern(void* data, size_t block, size_t bytes);
// "" when `data` holds fillPattern(block), else the first difference.
std::string checkPattern(const void* data, size_t block, size_t bytes);

std::string describe(const Reduction& reduction);

}  // namespace chorus::algorithms::testing
