// PrefixStore: a view of another Store with every key prefixed by "<prefix>/", so that
// communicators and subsystems share one store without key collisions.
#pragma once

#include <memory>

#include "store/store.h"

namespace chorus::store {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;

 private:
  std::string prefixed(const std::string& key) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace chorus::store
