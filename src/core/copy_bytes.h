// core/copy_bytes.h — memcpy for the bulk data paths, without `rep movsb`'s aliasing stall.
//
// Note [rep movsb and 4 KiB aliasing]
// glibc's memcpy copies sizes from a few KiB to about half a MiB with `rep movsb`. On the AMD EPYC
// machines chorus is measured on, `rep movsb` runs 12-15x slower when the destination lies 1-63
// bytes past the source modulo 4 KiB (one page): 256 KiB take 120-140 us instead of 8-10 us
// (glibc 2.36; newer glibc checks for this case, Debian 12's does not). A chunk slot of the shm
// backend starts on a page, and a NumPy array of that size starts 16 bytes into one (malloc's
// chunk header), so every copy-out of an allreduce into such an array hit the slow case: from
// Python, `allreduce(x, out=y)` of 1 MiB took 0.9 ms with y from NumPy and 0.15 ms with y from
// chorus. copyBytes takes memcpy, except in that window, where it copies with 16-byte vector
// loads and stores (measured equal to memcpy's good case, within 10%).
//
// Thread-safety: none needed (a pure function). Blocking: no. The ranges must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace chorus {

// Whether memcpy(dst, src, bytes) would take the slow path Note [rep movsb and 4 KiB aliasing]
// describes, so copyBytes copies by vectors instead.
inline bool copyAvoidsMemcpy(const void* dst, const void* src, size_t bytes) {
  constexpr size_t kPageBytes = 4096;
  constexpr size_t kSmallestRepMovsb = 2048;  // glibc copies less with vector loops
  constexpr uintptr_t kAliasingBytes = 64;
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & (kPageBytes - 1);
  return bytes >= kSmallestRepMovsb && distance != 0 && distance < kAliasingBytes;
}

// Copies by 16-byte vector loads and stores, front to back (see copyBytes).
void copyByVectors(void* dst, const void* src, size_t bytes);

// Copies `bytes` bytes from `src` to `dst`, as memcpy does, and accepts an empty copy with null
// pointers (an empty tensor's data pointer may be null). See Note [rep movsb and 4 KiB aliasing].
inline void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0)
    return;
  if (copyAvoidsMemcpy(dst, src, bytes))
    copyByVectors(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

}  // namespace chorus
