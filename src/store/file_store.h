// FileStore: a Store kept in one file on a shared file system, for jobs that have no network
// rendezvous. Every operation takes an flock(2) on the file, reads the whole record list, and
// appends or rewrites; waits re-read the file with a short backoff until their deadline.
// Processes on several hosts may share it if the file system honours flock.
#pragma once

#include "store/store.h"

namespace chorus::store {

class FileStore : public Store {
 public:
  // Creates the file (mode 0600) if it does not exist.
  explicit FileStore(std::string path);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;

 private:
  std::string path_;
};

}  // namespace chorus::store
