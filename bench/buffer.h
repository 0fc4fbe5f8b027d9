// A page-aligned, pre-faulted byte buffer for chorus-bench. Every page is written once at
// allocation, so the first touch of a page (about 10 us on the reference VM) never lands inside a
// timed iteration.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace chorus::bench {

class Buffer {
 public:
  static constexpr size_t kAlignment = 4096;

  explicit Buffer(size_t bytes) {
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    rounded = rounded == 0 ? kAlignment : rounded;
    data_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded)));
    if (data_ == nullptr) {
      throw std::bad_alloc();
    }
    std::memset(data_.get(), 0, rounded);
  }

  void* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(std::byte* data) const noexcept { std::free(data); }
  };
  std::unique_ptr<std::byte, Free> data_;
};

}  // namespace chorus::bench
