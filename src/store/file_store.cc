// FileStore: a Store kept in one file, for jobs whose ranks share a file system but no rendezvous
// server.
//
// The file is an append-only log of records, each
//   kind (1 byte: 'S' set, 'E' erase tombstone) | key length (u32 LE) | value length (u32 LE) |
//   key | value
// and the store's state is the log replayed from the start. Every operation opens the file, takes
// an flock(2) (shared to read, exclusive to write), replays the log and, for writes, appends one
// record. Opening per operation makes threads of one process exclude each other too (flock locks
// belong to an open file description, which threads sharing one descriptor would share).
//
// Cost: each operation reads the whole file, so it is O(file size). The log is compacted
// (rewritten with one record per live key) when it holds more than twice as many records as live
// keys, which keeps the file O(live data): the live records go to a new file that is renamed over
// the old one, so a crash leaves one whole log or the other. A torn trailing record (a writer
// killed mid-append) is ignored by readers and cut off by the next writer.
//
// Limits: there is no change notification across hosts, so get() and wait() re-read the file with
// exponential backoff (1 ms doubling to 50 ms) until their deadline; this is the one place in
// chorus where polling is the design. Works across hosts only where the file system honours flock.
#include "store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "chorus/error.h"
#include "core/check.h"
#include "store/store_util.h"

namespace chorus::store {
namespace {

constexpr uint8_t kSetRecord = 'S';
constexpr uint8_t kEraseRecord = 'E';
constexpr size_t kRecordHeaderBytes = 9;
constexpr std::chrono::milliseconds kMaxBackoff(50);

struct Log {
  std::map<std::string, Bytes> values;
  size_t validBytes = 0;  // length of the well-formed prefix
  size_t fileBytes = 0;
  size_t records = 0;
};

[[noreturn]] void throwFileError(const std::string& path, const char* doing, int error) {
  throw Error(::chorus::detail::concat("the file store at ", path, " failed to ", doing, ": ",
                                       std::strerror(error),
                                       "; check that the path is on a writable file system"));
}

uint32_t readU32(const uint8_t* in) {
  return uint32_t(in[0]) | uint32_t(in[1]) << 8 | uint32_t(in[2]) << 16 | uint32_t(in[3]) << 24;
}

void putU32(Bytes& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

void encodeRecord(Bytes& out, uint8_t kind, const std::string& key, const Bytes& value) {
  CHORUS_CHECK_ARG(key.size() <= UINT32_MAX && value.size() <= UINT32_MAX, "file store key \"",
                   key.substr(0, 64), "\" or its value is over 4 GiB");
  out.push_back(kind);
  putU32(out, static_cast<uint32_t>(key.size()));
  putU32(out, static_cast<uint32_t>(value.size()));
  out.insert(out.end(), key.begin(), key.end());
  out.insert(out.end(), value.begin(), value.end());
}

// The store file, opened and flock'ed for the lifetime of one operation.
class LockedFile {
 public:
  LockedFile(const std::string& path, bool exclusive) : path_(path) {
    // A compaction replaces the file (rename), so after locking, check that the locked file is
    // still the one at `path`; if not, lock the new one.
    while (true) {
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd_ < 0)
        throwFileError(path, "open", errno);
      while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
        if (errno != EINTR)
          fail("lock (flock)", errno);
      }
      struct stat locked {};
      struct stat current {};
      if (::fstat(fd_, &locked) != 0)
        fail("stat", errno);
      if (::stat(path.c_str(), &current) == 0 && current.st_ino == locked.st_ino &&
          current.st_dev == locked.st_dev) {
        return;
      }
      ::close(fd_);
    }
  }
  ~LockedFile() { ::close(fd_); }  // releases the lock
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  Log read() const {
    Bytes data = readAll();
    Log log;
    log.fileBytes = data.size();
    size_t at = 0;
    while (data.size() - at >= kRecordHeaderBytes) {
      uint8_t kind = data[at];
      size_t keyBytes = readU32(&data[at + 1]);
      size_t valueBytes = readU32(&data[at + 5]);
      size_t end = at + kRecordHeaderBytes + keyBytes + valueBytes;
      if ((kind != kSetRecord && kind != kEraseRecord) || end > data.size())
        break;
      const uint8_t* keyStart = &data[at + kRecordHeaderBytes];
      std::string key(keyStart, keyStart + keyBytes);
      if (kind == kSetRecord) {
        log.values[key] = Bytes(keyStart + keyBytes, keyStart + keyBytes + valueBytes);
      } else {
        log.values.erase(key);
      }
      ++log.records;
      at = end;
    }
    log.validBytes = at;
    return log;
  }

  // Appends one record to `log` (which read() returned, and which the caller has already updated
  // to the state after this record), compacting when the log is mostly dead records.
  void append(const Log& log, uint8_t kind, const std::string& key, const Bytes& value) {
    Bytes out;
    if (log.records + 1 > 2 * log.values.size() + 64) {
      for (const auto& [liveKey, liveValue] : log.values) {
        encodeRecord(out, kSetRecord, liveKey, liveValue);
      }
      replaceWith(out);
      return;
    }
    if (log.validBytes != log.fileBytes)
      truncate(log.validBytes);  // drop a torn record
    encodeRecord(out, kind, key, value);
    writeAt(out, log.validBytes);
  }

 private:
  [[noreturn]] void fail(const char* doing, int error) {
    ::close(fd_);
    throwFileError(path_, doing, error);
  }

  // Writes `data` to a new file and renames it over the store, so that a crash leaves either the
  // old log or the new one. Processes waiting for the old file's lock notice the rename.
  void replaceWith(const Bytes& data) {
    std::string temporary = ::chorus::detail::concat(path_, ".compact.", ::getpid());
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
      throwFileError(temporary, "create", errno);
    int oldFd = fd_;
    fd_ = fd;
    try {
      writeAt(data, 0);
    } catch (...) {
      fd_ = oldFd;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw;
    }
    fd_ = oldFd;
    ::close(fd);
    if (::rename(temporary.c_str(), path_.c_str()) != 0) {
      int error = errno;
      ::unlink(temporary.c_str());
      throwFileError(path_, "replace itself (rename)", error);
    }
  }

  Bytes readAll() const {
    Bytes data;
    uint8_t chunk[1 << 16];
    off_t offset = 0;
    while (true) {
      ssize_t got = ::pread(fd_, chunk, sizeof(chunk), offset);
      if (got < 0) {
        if (errno == EINTR)
          continue;
        throwFileError(path_, "read", errno);
      }
      if (got == 0)
        return data;
      data.insert(data.end(), chunk, chunk + got);
      offset += got;
    }
  }

  void writeAt(const Bytes& data, size_t offset) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t wrote = ::pwrite(fd_, data.data() + done, data.size() - done, offset + done);
      if (wrote < 0) {
        if (errno == EINTR)
          continue;
        throwFileError(path_, "write", errno);
      }
      done += static_cast<size_t>(wrote);
    }
  }

  void truncate(size_t bytes) {
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
      throwFileError(path_, "truncate", errno);
  }

  std::string path_;
  int fd_ = -1;
};

std::vector<std::string> missingKeys(const Log& log, const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (log.values.count(key) == 0)
      missing.push_back(key);
  }
  return missing;
}

// Re-reads the log with exponential backoff until it holds all `keys`; returns that log.
Log waitForKeys(const std::string& path, const std::vector<std::string>& keys, Deadline deadline) {
  std::chrono::milliseconds backoff(1);
  while (true) {
    Log log = LockedFile(path, /*exclusive=*/false).read();
    std::vector<std::string> missing = missingKeys(log, keys);
    if (missing.empty())
      return log;
    if (deadline.expired())
      throwMissingKeys(missing, "the file store at " + path);
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  CHORUS_CHECK_ARG(!path_.empty(), "FileStore needs a file path, got an empty one");
  LockedFile file(path_, /*exclusive=*/false);  // creates it, mode 0600
}

void FileStore::set(const std::string& key, const Bytes& value) {
  LockedFile file(path_, /*exclusive=*/true);
  Log log = file.read();
  log.values[key] = value;
  file.append(log, kSetRecord, key, value);
}

Bytes FileStore::get(const std::string& key, Deadline deadline) {
  return waitForKeys(path_, {key}, deadline).values.at(key);
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  LockedFile file(path_, /*exclusive=*/true);
  Log log = file.read();
  auto it = log.values.find(key);
  int64_t result = 0;
  Bytes updated = addToCounter(key, it == log.values.end() ? Bytes() : it->second, delta, result);
  log.values[key] = updated;
  file.append(log, kSetRecord, key, updated);
  return result;
}

Bytes FileStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  LockedFile file(path_, /*exclusive=*/true);
  Log log = file.read();
  auto it = log.values.find(key);
  bool matches = it == log.values.end() ? expected.empty() : it->second == expected;
  if (!matches)
    return it == log.values.end() ? Bytes() : it->second;
  log.values[key] = desired;
  file.append(log, kSetRecord, key, desired);
  return desired;
}

void FileStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  waitForKeys(path_, keys, deadline);
}

bool FileStore::check(const std::vector<std::string>& keys) {
  LockedFile file(path_, /*exclusive=*/false);
  return missingKeys(file.read(), keys).empty();
}

bool FileStore::erase(const std::string& key) {
  LockedFile file(path_, /*exclusive=*/true);
  Log log = file.read();
  if (log.values.erase(key) == 0)
    return false;
  file.append(log, kEraseRecord, key, Bytes());
  return true;
}

}  // namespace chorus::store
