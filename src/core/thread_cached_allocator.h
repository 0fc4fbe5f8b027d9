// ThreadCachedAllocator: a standard allocator for objects that a hot path makes and drops once per
// call (a blocking call's Work, through std::allocate_shared). Single objects come from a small
// per-thread stack of freed blocks, so a warmed thread allocates nothing and takes no lock (a
// synchronized pool took a reader-writer lock twice per call). A block freed on another thread
// joins that thread's stack; past kCachedBlocks, and for arrays, the heap serves.
#pragma once

#include <cstddef>
#include <memory>

namespace chorus::detail {

template <typename T>
class ThreadCachedAllocator {
 public:
  using value_type = T;

  ThreadCachedAllocator() = default;
  template <typename U>
  ThreadCachedAllocator(const ThreadCachedAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    if (n == 1 && !cacheGone) {
      Cache& cache = threadCache();
      if (cache.count > 0)
        return static_cast<T*>(cache.blocks[--cache.count]);
    }
    return std::allocator<T>().allocate(n);
  }

  void deallocate(T* block, std::size_t n) noexcept {
    if (n == 1 && !cacheGone) {
      Cache& cache = threadCache();
      if (cache.count < kCachedBlocks) {
        cache.blocks[cache.count++] = block;
        return;
      }
    }
    std::allocator<T>().deallocate(block, n);
  }

  friend bool operator==(const ThreadCachedAllocator&, const ThreadCachedAllocator&) {
    return true;
  }

 private:
  static constexpr int kCachedBlocks = 8;
  struct Cache {
    void* blocks[kCachedBlocks];
    int count = 0;
    ~Cache() {
      cacheGone = true;  // a block freed later in this thread's exit goes to the heap
      while (count > 0) std::allocator<T>().deallocate(static_cast<T*>(blocks[--count]), 1);
    }
  };
  static Cache& threadCache() {
    thread_local Cache cache;
    return cache;
  }
  static inline thread_local bool cacheGone = false;  // trivial: readable until the thread ends
};

}  // namespace chorus::detail
