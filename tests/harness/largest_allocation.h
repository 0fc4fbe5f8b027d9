// The largest single allocation made through operator new, for tests that check memory follows
// the bytes that arrive rather than a length a peer claims (the fuzz regression tests).
//
// Linking chorus_largest_allocation replaces the global operator new and delete of the whole test
// executable (malloc and free underneath), so use it in its own executable.
#pragma once

#include <cstddef>

namespace chorus::testing {

// Forgets what was seen so far.
void resetLargestAllocation();
// Bytes of the largest operator new since the last reset.
size_t largestAllocation();

}  // namespace chorus::testing
