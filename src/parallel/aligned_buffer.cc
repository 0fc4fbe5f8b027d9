// AlignedBuffer (see aligned_buffer.h).
#include "parallel/aligned_buffer.h"

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

}  // namespace chorus::parallel
