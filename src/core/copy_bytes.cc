// core/copy_bytes.cc — see copy_bytes.h and Note [rep movsb and 4 KiB aliasing].
#include "core/copy_bytes.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace chorus {

#if defined(__x86_64__)
// GCC's loop distribution could turn a plain copy loop back into a memcpy call, the very thing
// this avoids; the SSE2 intrinsics (x86-64's baseline) keep it a loop.
void copyByVectors(void* dst, const void* src, size_t bytes) noexcept {
  auto* to = static_cast<std::byte*>(dst);
  const auto* from = static_cast<const std::byte*>(src);
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i + 48), d);
  }
  if (i < bytes)  // memcpy's pointers may not be null, even for 0 bytes
    std::memcpy(to + i, from + i, bytes - i);  // under 64 bytes: no `rep movsb`
}
#else
void copyByVectors(void* dst, const void* src, size_t bytes) noexcept {
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}
#endif

}  // namespace chorus
