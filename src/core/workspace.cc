// Workspace: see workspace.h.
#include "core/workspace.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace chorus {
namespace {
constexpr size_t kAlignment = 64;
}  // namespace

void Workspace::FreeDeleter::operator()(void* p) const noexcept { std::free(p); }

Workspace::Workspace() = default;
Workspace::~Workspace() = default;

void* Workspace::get(size_t bytes) {
  if (bytes <= capacity_ && buffer_)
    return buffer_.get();
  // Grow geometrically so a sequence of slightly larger calls does not reallocate every time.
  size_t capacity = std::max(bytes, capacity_ + capacity_ / 2);
  capacity = (std::max<size_t>(capacity, kAlignment) + kAlignment - 1) & ~(kAlignment - 1);
  buffer_.reset();
  capacity_ = 0;
  void* p = std::aligned_alloc(kAlignment, capacity);
  if (p == nullptr)
    throw std::bad_alloc();
  buffer_.reset(static_cast<std::byte*>(p));
  capacity_ = capacity;
  return p;
}

}  // namespace chorus
