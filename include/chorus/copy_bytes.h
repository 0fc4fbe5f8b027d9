// chorus/copy_bytes.h — memcpy for bulk data, without glibc's `rep movsb` stall.
//
// Contract:
//  - copyBytes(dst, src, bytes) copies as memcpy does; the ranges must not overlap. An empty copy
//    may pass null pointers (an empty tensor's data pointer may be null).
//  - Where memcpy would stall (sizes from 2 KiB, the destination 1-63 bytes past the source modulo
//    a 4 KiB page: Note [rep movsb and 4 KiB aliasing], src/core/copy_bytes.h), it copies with
//    vector loads and stores instead; everywhere else it is memcpy. copyAvoidsMemcpy says which.
//  - Thread-safe (a pure function), never throws, never blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace chorus {

// Whether copyBytes(dst, src, bytes) avoids memcpy (see the contract).
inline bool copyAvoidsMemcpy(const void* dst, const void* src, size_t bytes) {
  constexpr size_t kPageBytes = 4096;
  constexpr size_t kSmallestRepMovsb = 2048;  // glibc copies less with vector loops
  constexpr uintptr_t kAliasingBytes = 64;
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & (kPageBytes - 1);
  return bytes >= kSmallestRepMovsb && distance != 0 && distance < kAliasingBytes;
}

// Copies by 16-byte vector loads and stores, front to back (what copyBytes takes in the window).
void copyByVectors(void* dst, const void* src, size_t bytes) noexcept;

inline void copyBytes(void* dst, const void* src, size_t bytes) noexcept {
  if (bytes == 0)
    return;
  if (copyAvoidsMemcpy(dst, src, bytes))
    copyByVectors(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

}  // namespace chorus
