// PrefixStore: forwards every operation to the base store with keys rewritten to "<prefix>/<key>".
#include "store/prefix_store.h"

#include "core/check.h"

namespace chorus::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  CHORUS_CHECK_ARG(base_ != nullptr, "PrefixStore \"", prefix_, "\" needs a base store, got null");
}

std::string PrefixStore::prefixed(const std::string& key) const { return prefix_ + "/" + key; }

void PrefixStore::set(const std::string& key, const Bytes& value) {
  base_->set(prefixed(key), value);
}

Bytes PrefixStore::get(const std::string& key, Deadline deadline) {
  return base_->get(prefixed(key), deadline);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(prefixed(key), delta);
}

Bytes PrefixStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return base_->compareSet(prefixed(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(prefixed(key));
  base_->wait(full, deadline);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(prefixed(key));
  return base_->check(full);
}

bool PrefixStore::erase(const std::string& key) { return base_->erase(prefixed(key)); }

}  // namespace chorus::store
