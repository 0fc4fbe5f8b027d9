// Shared memory between processes: see shared_memory.h.
#include "core/shared_memory.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/check.h"

namespace chorus::detail {
namespace {

constexpr size_t kPage = 4096;

// Maps `fd` shared, with its page tables filled (MAP_POPULATE); huge pages advised (only advice:
// /sys/kernel/mm/transparent_hugepage/shmem_enabled decides).
void* mapShared(int fd, size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED)
    detail::throwSystemError("mmap", errno, __FILE__, __LINE__);
  ::madvise(base, bytes, MADV_HUGEPAGE);
  return base;
}

// Runs `body(fd)` and closes `fd` whatever happens.
template <typename Body>
void withFd(int fd, Body&& body) {
  try {
    body(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace

SharedMapping SharedMapping::create(const std::string& name, size_t bytes, int rank) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST)
    return SharedMapping();
  if (fd < 0)
    detail::throwSystemError("shm_open", errno, __FILE__, __LINE__);
  SharedMapping mapping;
  try {
    withFd(fd, [&](int descriptor) {
      if (const int error = ::posix_fallocate(descriptor, 0, static_cast<off_t>(bytes))) {
        throw InternalError(detail::concat(
            "rank ", rank, " (this process): cannot allocate ", bytes, " bytes for ", name,
            " in /dev/shm: ", std::strerror(error),
            "; make /dev/shm larger (docker: --shm-size) or use CHORUS_BACKEND=tcp"));
      }
      mapping.base_ = mapShared(descriptor, bytes);
      mapping.bytes_ = bytes;
    });
  } catch (...) {
    ::shm_unlink(name.c_str());  // created here and shared with no one yet
    throw;
  }
  for (size_t offset = 0; offset < bytes; offset += kPage)
    static_cast<volatile uint8_t*>(mapping.base_)[offset] = 0;
  return mapping;
}

SharedMapping SharedMapping::open(const std::string& name, size_t bytes, int rank) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    detail::throwSystemError("shm_open", errno, __FILE__, __LINE__);
  SharedMapping mapping;
  withFd(fd, [&](int descriptor) {
    struct stat info {};
    CHORUS_SYSCHECK(::fstat(descriptor, &info));
    CHORUS_CHECK_ARG(static_cast<size_t>(info.st_size) == bytes, "rank ", rank,
                     " (this process): shared-memory segment ", name, " has ", info.st_size,
                     " bytes, expected ", bytes,
                     "; do all ranks run the same chorus build and group size?");
    mapping.base_ = mapShared(descriptor, bytes);
    mapping.bytes_ = bytes;
  });
  // Reads suffice: the pages were populated writable (MAP_POPULATE of a shared mapping).
  for (size_t offset = 0; offset < bytes; offset += kPage)
    (void)static_cast<volatile const uint8_t*>(mapping.base_)[offset];
  return mapping;
}

SharedMapping& SharedMapping::operator=(SharedMapping&& other) noexcept {
  if (this != &other) {
    this->~SharedMapping();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

SharedMapping::~SharedMapping() {
  if (base_ != nullptr)
    ::munmap(base_, bytes_);
  base_ = nullptr;
}

void futexWait(std::atomic<uint32_t>& word,
               uint32_t seen,
               std::chrono::microseconds limit) noexcept {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limit);
  const timespec timeout{static_cast<time_t>(seconds.count()),
                         static_cast<long>((limit - seconds).count() * 1000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
}

std::string shmSegmentPrefix() {
  const char* job = std::getenv("CHORUS_JOB_ID");
  if (job == nullptr || *job == '\0')
    return detail::concat("/chorus-p", ::getpid(), "-");
  std::string id(job);
  bool plain = std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
  CHORUS_CHECK_ARG(plain && id.size() < 200, "CHORUS_JOB_ID='", id,
                   "' cannot be part of a shared-memory name: use letters, digits and '_' only "
                   "(chorusrun sets a hex id)");
  return "/chorus-" + id + "-";
}

}  // namespace chorus::detail
