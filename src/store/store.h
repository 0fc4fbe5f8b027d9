// Store: the key-value rendezvous that ranks use to find each other (c10d's Store contract).
//
// Contract:
//  - set() stores a value, replacing any previous one. get() returns the value, waiting for the key
//    to appear until `deadline` (TimeoutError naming the key). add() atomically adds to a decimal
//    integer value (a missing key counts as 0) and returns the new value. compareSet() replaces the
//    value with `desired` if it currently equals `expected` (a missing key matches an empty
//    `expected`) and returns the value after the call. wait() waits until all keys exist
//    (TimeoutError naming the missing ones). check() says whether all keys exist, without waiting.
//    erase() removes a key; it returns whether the key existed.
//  - Implementations are thread-safe. Values are arbitrary bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"

namespace chorus::store {

using Bytes = std::vector<uint8_t>;

Bytes toBytes(std::string_view text);
std::string toString(const Bytes& bytes);

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes get(const std::string& key, Deadline deadline) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  virtual void wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual bool erase(const std::string& key) = 0;
};

}  // namespace chorus::store
