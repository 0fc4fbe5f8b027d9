// parallel/aligned_buffer.h — the zeroed, aligned memory that training state lives in (gradient
// buckets, ZeRO's parameter, gradient and optimizer shards).
//
// Contract:
//  - AlignedBuffer(bytes) allocates at least `bytes` bytes aligned to kSlotAlignmentBytes (64), or
//    to a huge page for buffers of a huge page or more (advised MADV_HUGEPAGE), and zeroes them,
//    which also faults the pages in before the first use (a first touch costs ~10 us per page).
//  - bytes() is the size asked for; the memory is freed with the buffer. Frameworks that view the
//    memory hold a shared_ptr to the buffer (Tensor::toDLPack's owner) to keep it alive.
//  - discard() returns the whole pages inside the buffer to the system (madvise MADV_DONTNEED)
//    and returns how many bytes that was. The buffer keeps its address and stays usable: those
//    pages read zeros until written again (and cost a first touch then); the bytes at its edges,
//    which share a page with other memory, keep their values.
//  - Allocation failure is InternalError naming the size and `what`.
#pragma once

#include <cstddef>
#include <string>

namespace chorus::parallel {

class AlignedBuffer {
 public:
  AlignedBuffer(size_t bytes, const std::string& what);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  size_t discard();

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

}  // namespace chorus::parallel
