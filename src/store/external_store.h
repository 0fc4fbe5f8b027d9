// ExternalStore: a store::Store over a KeyValueStore that the program supplied
// (chorus/key_value_store.h), so that the connector and the backends rendezvous through it as
// through chorus's own stores. Deadlines become the timeouts the KeyValueStore takes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chorus/key_value_store.h"
#include "store/store.h"

namespace chorus::store {

class ExternalStore : public Store {
 public:
  explicit ExternalStore(std::shared_ptr<KeyValueStore> store) : store_(std::move(store)) {}

  void set(const std::string& key, const Bytes& value) override { store_->set(key, value); }
  Bytes get(const std::string& key, Deadline deadline) override {
    return store_->get(key, deadline.remaining());
  }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return store_->compareSet(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    store_->wait(keys, deadline.remaining());
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  bool erase(const std::string& key) override { return store_->erase(key); }

 private:
  std::shared_ptr<KeyValueStore> store_;
};

}  // namespace chorus::store
