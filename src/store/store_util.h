// Helpers shared by the Store implementations: the TimeoutError every store raises for missing
// keys, and the decimal counters behind add().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace chorus::store {

// Throws TimeoutError naming the missing keys; `where` says which store ("the store at host:port").
[[noreturn]] void throwMissingKeys(const std::vector<std::string>& missing, std::string_view where);

// The counter value of `key` (a missing key, i.e. empty bytes, is 0). A value that is not a decimal
// int64 is InvalidArgumentError naming the key.
int64_t parseCounter(const std::string& key, const Bytes& value);
// current + delta as a counter value; overflow is InvalidArgumentError naming the key.
Bytes addToCounter(const std::string& key, const Bytes& current, int64_t delta, int64_t& result);

}  // namespace chorus::store
