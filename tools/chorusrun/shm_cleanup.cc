// Removing a job's shared-memory segments (see shm_cleanup.h).
#include "shm_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

namespace chorus::launcher {

std::string jobSegmentPrefix(const std::string& jobId) { return "chorus-" + jobId + "-"; }

std::vector<std::string> removeJobSharedMemory(const std::string& jobId,
                                               const std::string& directory) noexcept {
  std::vector<std::string> failures;
  if (jobId.empty()) {
    return failures;
  }
  try {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(directory.c_str()), ::closedir);
    if (!dir) {
      if (errno != ENOENT && errno != ENOTDIR) {
        failures.push_back(directory + ": cannot list it: " + std::strerror(errno));
      }
      return failures;
    }
    std::string prefix = jobSegmentPrefix(jobId);
    int dirFd = ::dirfd(dir.get());
    while (true) {
      errno = 0;
      dirent* entry = ::readdir(dir.get());
      if (entry == nullptr) {
        if (errno != 0) {
          failures.push_back(directory + ": cannot list it: " + std::strerror(errno));
        }
        break;
      }
      std::string_view name(entry->d_name);
      if (name.substr(0, prefix.size()) != prefix) {
        continue;
      }
      // Unlinking while reading is fine: readdir returns each remaining entry at most once.
      if (::unlinkat(dirFd, entry->d_name, 0) != 0 && errno != ENOENT) {
        failures.push_back(directory + "/" + entry->d_name + ": " + std::strerror(errno));
      }
    }
  } catch (const std::exception&) {
    failures.push_back(directory + ": out of memory while removing the job's segments");
  }
  return failures;
}

}  // namespace chorus::launcher
