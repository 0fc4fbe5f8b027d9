// chorus/key_value_store.h — a key-value store that the program supplies, for chorus to
// rendezvous through instead of its own (DistContext::connectThrough): torch.distributed's Store
// under torchrun, say, where the launcher gives chorus nothing of its own.
//
// Contract (c10d's Store contract; chorus's own stores keep it too):
//  - set() stores a value, replacing any previous one. get() returns the value, waiting up to
//    `timeout` for the key to appear, and throws chorus::TimeoutError naming the key if it does
//    not. add() atomically adds `delta` to a decimal integer value (a missing key counts as 0) and
//    returns the new value. compareSet() replaces the value with `desired` if it equals `expected`
//    (a missing key matches an empty `expected`) and returns the value after the call. wait()
//    waits up to `timeout` until every key exists (TimeoutError naming the missing ones). check()
//    says whether every key exists, without waiting. erase() removes a key and says whether it
//    existed.
//  - Every rank of the job sees the same store. Implementations are thread-safe; values are
//    arbitrary bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

class KeyValueStore {
 public:
  using Bytes = std::vector<uint8_t>;

  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual bool erase(const std::string& key) = 0;
};

}  // namespace chorus
