// Shared memory between the processes of one node: SharedMapping (one POSIX shared-memory object
// mapped into this process), the futex calls on words inside such memory, and the prefix of every
// shared-memory name chorus makes. The shm transport's segments (transport/shm/segment.h) and the
// shm backend's group (backend/shm/shm_group.h) are both built on them.
//
// Creation reserves the memory with posix_fallocate, not ftruncate, so a full /dev/shm is an error
// naming the object and the fix (docker: --shm-size; CHORUS_BACKEND=tcp), not a SIGBUS on first
// touch. Every page is touched once when mapped (creator and openers alike): a first touch costs
// ~10 µs on these VMs and the hot path must not pay it. Once create() has returned, the name is
// its owner's to unlink (after every rank has mapped it); a create() that fails removes it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::detail {

class SharedMapping {
 public:
  // Creates `name` (starts with "/") of `bytes`, mode 0600, maps it and writes every page once
  // (the memory reads as zeros). Empty (valid() false) when the name exists already. Errors name
  // `rank` (this process's rank) and the object.
  static SharedMapping create(const std::string& name, size_t bytes, int rank);
  // Maps the existing `name`, which must be `bytes` long (InvalidArgumentError otherwise: ranks of
  // different builds or group sizes), and faults its pages in.
  static SharedMapping open(const std::string& name, size_t bytes, int rank);

  SharedMapping() = default;
  SharedMapping(SharedMapping&& other) noexcept { *this = std::move(other); }
  SharedMapping& operator=(SharedMapping&& other) noexcept;
  ~SharedMapping();

  bool valid() const { return base_ != nullptr; }
  std::byte* base() const { return static_cast<std::byte*>(base_); }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// FUTEX_WAIT on a word in shared memory (not FUTEX_PRIVATE): returns when the word differs from
// `seen`, on a wake, or after `limit`. Never throws.
void futexWait(std::atomic<uint32_t>& word,
               uint32_t seen,
               std::chrono::microseconds limit) noexcept;
// Wakes every waiter on `word`. Never throws.
void futexWakeAll(std::atomic<uint32_t>& word) noexcept;

// "/chorus-<CHORUS_JOB_ID>-" (chorusrun sets a hex id, and removes /dev/shm/chorus-<id>-* after
// the job), or "/chorus-p<pid>-" outside chorusrun. InvalidArgumentError for a CHORUS_JOB_ID that
// cannot be part of a name (letters, digits and '_' only).
std::string shmSegmentPrefix();

}  // namespace chorus::detail
