// HashStore: an in-process Store, a std::map under one mutex. Writers notify a condition variable
// that get() and wait() sleep on, so a waiter wakes as soon as its key appears (no polling).
// Cost: O(log n) per operation plus the copy of the value.
#include "store/hash_store.h"

#include "chorus/error.h"
#include "store/store_util.h"

namespace chorus::store {
namespace {

constexpr std::string_view kWhere = "the in-process store";

// Waits on `changed` until `ready()` or `deadline`; returns ready().
template <typename Ready>
bool waitUntil(std::condition_variable& changed,
               std::unique_lock<std::mutex>& lock,
               Deadline deadline,
               Ready ready) {
  if (deadline.isNever()) {
    changed.wait(lock, ready);
    return true;
  }
  return changed.wait_until(lock, deadline.at(), ready);
}

}  // namespace

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

Bytes HashStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!waitUntil(changed_, lock, deadline, [&] { return values_.count(key) > 0; })) {
    throwMissingKeys({key}, kWhere);
  }
  return values_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    Bytes updated = addToCounter(key, it == values_.end() ? Bytes() : it->second, delta, result);
    values_[key] = std::move(updated);
  }
  changed_.notify_all();
  return result;
}

Bytes HashStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes after;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      if (!expected.empty())
        return Bytes();  // still missing
      values_[key] = desired;
    } else if (it->second == expected) {
      it->second = desired;
    } else {
      return it->second;
    }
    after = desired;
  }
  changed_.notify_all();
  return after;
}

void HashStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto allPresent = [&] {
    for (const auto& key : keys) {
      if (values_.count(key) == 0)
        return false;
    }
    return true;
  };
  if (waitUntil(changed_, lock, deadline, allPresent))
    return;
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (values_.count(key) == 0)
      missing.push_back(key);
  }
  throwMissingKeys(missing, kWhere);
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& key : keys) {
    if (values_.count(key) == 0)
      return false;
  }
  return true;
}

bool HashStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_.erase(key) > 0;
}

}  // namespace chorus::store
