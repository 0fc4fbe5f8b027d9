// CrossMemoryReader: copies out of another process's private memory with process_vm_readv ("cross-
// memory attach"): one copy, where a copy through shared memory takes two. The shm backend reads
// its peers' buffers this way (backend/shm/shm_group.h), and the shm transport its large messages
// (transport/shm/transport.cc).
//
// Contract:
//  - enabled(): false when CHORUS_SHM_DIRECT=0 turns direct reads off.
//  - canRead(pid, address, expected): whether the 8-byte word at `address` in process `pid` reads
//    as `expected`: a probe of whether the kernel lets this process read that one (it refuses with
//    EPERM under Yama ptrace_scope >= 1 without CAP_SYS_PTRACE, or with ENOSYS, or a seccomp
//    filter does). Never throws.
//  - read(pid, to, from, bytes): copies `bytes` at address `from` in `pid` to `to`, in pieces (one
//    call never pins a huge range). Where the kernel's copy would stall at this pair's alignment
//    (copyAvoidsMemcpy, core/copy_bytes.h), each piece lands in a staging buffer at the source's
//    offset in its page, then is copied out while in cache. Returns 0 once every byte is copied,
//    else the errno of the piece that failed (ESRCH: the process is gone; EFAULT for a read that
//    returned nothing). The staging buffer is made at the first read that needs it and kept.
//  - One reader per thread at a time (the staging buffer is its own).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::detail {

class CrossMemoryReader {
 public:
  static bool enabled();
  static bool canRead(pid_t pid, uintptr_t address, uint64_t expected) noexcept;

  int read(pid_t pid, void* to, uintptr_t from, size_t bytes);

 private:
  std::vector<std::byte> staging_;
};

}  // namespace chorus::detail
