// See cross_memory.h.
#include "core/cross_memory.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "core/copy_bytes.h"
#include "core/env.h"

namespace chorus::detail {
namespace {

// A direct read's pieces, so that one call never pins a huge range at once.
constexpr size_t kDirectPieceBytes = 2 << 20;
// A staged read's pieces: each is read, then copied out while it is in this core's cache.
constexpr size_t kStagedPieceBytes = 64 << 10;
constexpr size_t kPageBytes = 4096;

// One process_vm_readv of up to `bytes`: the bytes it read, or -errno.
ssize_t readPiece(pid_t pid, std::byte* to, uintptr_t from, size_t bytes) {
  iovec local{to, bytes};
  iovec remote{reinterpret_cast<void*>(from), bytes};
  const ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (got > 0)
    return got;
  return got < 0 ? -errno : -EFAULT;
}

}  // namespace

bool CrossMemoryReader::enabled() { return env::integer("CHORUS_SHM_DIRECT").value_or(1) != 0; }

bool CrossMemoryReader::canRead(pid_t pid, uintptr_t address, uint64_t expected) noexcept {
  uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(address), sizeof value};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof value && value == expected;
}

int CrossMemoryReader::read(pid_t pid, void* to, uintptr_t from, size_t bytes) {
  auto* destination = static_cast<std::byte*>(to);
  const bool staged = copyAvoidsMemcpy(to, reinterpret_cast<const void*>(from), bytes);
  if (staged && staging_.empty())
    staging_.resize(kStagedPieceBytes + 2 * kPageBytes);
  while (bytes > 0) {
    if (!staged) {
      const ssize_t got = readPiece(pid, destination, from, std::min(bytes, kDirectPieceBytes));
      if (got < 0)
        return static_cast<int>(-got);
      destination += got;
      from += static_cast<size_t>(got);
      bytes -= static_cast<size_t>(got);
      continue;
    }
    // The staging copy starts at `from`'s offset in its page: the kernel copies at distance 0.
    const uintptr_t base = reinterpret_cast<uintptr_t>(staging_.data());
    std::byte* landing =
        staging_.data() + (kPageBytes - base % kPageBytes) % kPageBytes + from % kPageBytes;
    const ssize_t got = readPiece(pid, landing, from, std::min(bytes, kStagedPieceBytes));
    if (got < 0)
      return static_cast<int>(-got);
    copyBytes(destination, landing, static_cast<size_t>(got));
    destination += got;
    from += static_cast<size_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace chorus::detail
