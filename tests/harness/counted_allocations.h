// What the test executable allocates through operator new: the largest single allocation, for
// tests that check memory follows the bytes that arrive rather than a length a peer claims (the
// fuzz regression tests), and the number of allocations, for tests that check a warmed call
// allocates nothing (allocation_free_test).
//
// Linking chorus_counted_allocations replaces the global operator new and delete of the whole test
// executable (every form, aligned ones included; malloc and free underneath), so use it in its own
// executable. Both records are process-wide and thread-safe: every thread's allocations count.
// chorus_allocation_counter is the same as a shared library, for LD_PRELOAD into a process that is
// not a C++ executable (Python): it exports chorus_testing_allocation_count() for ctypes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::testing {

// Forgets what was seen so far.
void resetLargestAllocation();
// Bytes of the largest operator new since the last reset.
size_t largestAllocation();
// How many times operator new (any form) has allocated since the process started.
uint64_t allocationCount();

}  // namespace chorus::testing
