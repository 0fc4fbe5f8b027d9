// HashStore: an in-process Store (a map under a mutex), for ranks that are threads of one process
// (tests) and as the state behind the TCP store server.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "store/store.h"

namespace chorus::store {

class HashStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
};

}  // namespace chorus::store
