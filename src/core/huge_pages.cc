#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace chorus {

void adviseHugePages(void* data, size_t bytes) noexcept {
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t end = (start + bytes) & ~(kHugePageBytes - 1);
  if (end > begin)
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace chorus
