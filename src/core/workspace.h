// Workspace: scratch memory reused across calls, so the hot path neither allocates nor faults in
// fresh pages once warm. One per communicator (the front end stages widened or fused tensors in
// one; the algorithmic backend gives one to its algorithms). Not thread-safe: one call at a time.
#pragma once

#include <cstddef>
#include <memory>

namespace chorus {

class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A 64-byte aligned buffer of at least `bytes`, valid until the next call to get(). Contents are
  // unspecified. Never shrinks; grows geometrically. Throws std::bad_alloc.
  void* get(size_t bytes);

 private:
  struct FreeDeleter {
    void operator()(void* p) const noexcept;
  };

  std::unique_ptr<std::byte, FreeDeleter> buffer_;
  size_t capacity_ = 0;
};

}  // namespace chorus
