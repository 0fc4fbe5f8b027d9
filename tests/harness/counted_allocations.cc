// Replaces the global operator new to record the largest allocation and count them all. See
// counted_allocations.h.
#include "harness/counted_allocations.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace chorus::testing {
namespace {

std::atomic<size_t> largest{0};
std::atomic<uint64_t> count{0};

void note(size_t size) {
  count.fetch_add(1, std::memory_order_relaxed);
  size_t seen = largest.load();
  while (size > seen && !largest.compare_exchange_weak(seen, size)) {
  }
}

void* countedAllocation(size_t size) {
  note(size);
  if (void* memory = std::malloc(size == 0 ? 1 : size))
    return memory;
  throw std::bad_alloc();
}

void* countedAlignedAllocation(size_t size, std::align_val_t alignment) {
  note(size);
  const auto align = static_cast<size_t>(alignment);
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t rounded = size == 0 ? align : (size + align - 1) / align * align;
  if (void* memory = std::aligned_alloc(align, rounded))
    return memory;
  throw std::bad_alloc();
}

}  // namespace

void resetLargestAllocation() { largest.store(0); }
size_t largestAllocation() { return largest.load(); }
uint64_t allocationCount() { return count.load(); }

}  // namespace chorus::testing

// For a process that loads this as a preloaded library (LD_PRELOAD) and reads it through ctypes.
extern "C" uint64_t chorus_testing_allocation_count() { return chorus::testing::allocationCount(); }

void* operator new(size_t size) { return chorus::testing::countedAllocation(size); }
void* operator new[](size_t size) { return chorus::testing::countedAllocation(size); }
void* operator new(size_t size, std::align_val_t alignment) {
  return chorus::testing::countedAlignedAllocation(size, alignment);
}
void* operator new[](size_t size, std::align_val_t alignment) {
  return chorus::testing::countedAlignedAllocation(size, alignment);
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t, std::align_val_t) noexcept { std::free(memory); }
