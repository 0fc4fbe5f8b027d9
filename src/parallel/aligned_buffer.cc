// AlignedBuffer (see aligned_buffer.h).
#include "parallel/aligned_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "chorus/error.h"
#include "core/huge_pages.h"
#include "parallel/bucket_plan.h"

namespace chorus::parallel {

AlignedBuffer::AlignedBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  size_t rounded = (bytes + kSlotAlignmentBytes - 1) / kSlotAlignmentBytes * kSlotAlignmentBytes;
  size_t alignment = rounded >= kHugePageBytes ? kHugePageBytes : kSlotAlignmentBytes;
  if (rounded == 0)
    rounded = alignment;
  if (posix_memalign(&data_, alignment, rounded) != 0)
    throw InternalError(what + ": cannot allocate " + std::to_string(bytes) + " bytes");
  adviseHugePages(data_, rounded);
  std::memset(data_, 0, rounded);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

size_t AlignedBuffer::discard() {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t end = (start + bytes_) / page * page;
  if (end <= first)
    return 0;
  // Private anonymous memory (the heap's and mmap's both): a later read finds a zero page.
  if (madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED) != 0)
    return 0;  // the memory stays, and so do its contents: nothing is lost
  return end - first;
}

}  // namespace chorus::parallel
