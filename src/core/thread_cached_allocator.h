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
    if (n == 1) {
      Cache& cache = threadCache;
      if (cache.count > 0)
        return static_cast<T*>(cache.blocks[--cache.count]);
    }
    return std::allocator<T>().allocate(n);
  }

  void deallocate(T* block, std::size_t n) noexcept {
    if (n == 1) {
      Cache& cache = threadCache;
      if (cache.count < kCachedBlocks && !cache.closed) {
        if (!cache.armed)
          arm(cache);
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
  // Trivially destructible and zero-initialized, so a use is one thread-local access with no
  // guard (a thread_local with a destructor is reached through a wrapper that checks a guard).
  struct Cache {
    void* blocks[kCachedBlocks];
    int count;
    bool armed;   // this thread's Reaper exists
    bool closed;  // the Reaper ran: blocks freed later in this thread's exit go to the heap
  };
  static inline thread_local Cache threadCache{};
  // Frees the cached blocks when the thread ends; made at the thread's first cached block.
  struct Reaper {
    ~Reaper() {
      Cache& cache = threadCache;
      cache.closed = true;
      while (cache.count > 0)
        std::allocator<T>().deallocate(static_cast<T*>(cache.blocks[--cache.count]), 1);
    }
  };
  static void arm(Cache& cache) noexcept {
    static thread_local Reaper reaper;
    cache.armed = true;
  }
};

}  // namespace chorus::detail
