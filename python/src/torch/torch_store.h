// TorchStore: torch.distributed's Store as a chorus::KeyValueStore, so that chorus's world can
// rendezvous through the store torch made (env://, tcp://, file://, torchrun's) when no chorus
// launcher started the process (DistContext::connectThrough).
//
// Contract: the KeyValueStore contract (chorus/key_value_store.h) over the c10d::Store it holds
// (alive as long as this object). An expired wait or get is a chorus::TimeoutError naming the keys
// and quoting torch's message; other torch errors pass through as they are.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "chorus/key_value_store.h"

namespace chorus::torch_backend {

class TorchStore : public KeyValueStore {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const Bytes& value) override { store_->set(key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return store_->compareSet(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  bool erase(const std::string& key) override { return store_->deleteKey(key); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace chorus::torch_backend
