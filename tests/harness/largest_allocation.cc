// Replaces the global operator new to record the largest allocation. See largest_allocation.h.
#include "harness/largest_allocation.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace chorus::testing {
namespace {

std::atomic<size_t> largest{0};

void* countedAllocation(size_t size) {
  size_t seen = largest.load();
  while (size > seen && !largest.compare_exchange_weak(seen, size)) {
  }
  if (void* memory = std::malloc(size == 0 ? 1 : size))
    return memory;
  throw std::bad_alloc();
}

}  // namespace

void resetLargestAllocation() { largest.store(0); }
size_t largestAllocation() { return largest.load(); }

}  // namespace chorus::testing

void* operator new(size_t size) { return chorus::testing::countedAllocation(size); }
void* operator new[](size_t size) { return chorus::testing::countedAllocation(size); }
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t) noexcept { std::free(memory); }
