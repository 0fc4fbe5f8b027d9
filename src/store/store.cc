// Byte conversions and the helpers shared by the Store implementations (store_util.h).
#include "store/store.h"

#include <charconv>

#include "chorus/error.h"
#include "core/check.h"
#include "store/store_util.h"

namespace chorus::store {

Bytes toBytes(std::string_view text) { return Bytes(text.begin(), text.end()); }

std::string toString(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

void throwMissingKeys(const std::vector<std::string>& missing, std::string_view where) {
  std::string names;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i > 0)
      names += ", ";
    names += "\"" + missing[i] + "\"";
  }
  throw TimeoutError(::chorus::detail::concat(
      "timed out waiting for ", missing.size() == 1 ? "key " : "keys ", names, " in ", where,
      "; the rank that should set ", missing.size() == 1 ? "it" : "them",
      " may have failed or not started yet (raise CHORUS_TIMEOUT if it is just slow)"));
}

int64_t parseCounter(const std::string& key, const Bytes& value) {
  if (value.empty())
    return 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  int64_t result = 0;
  auto [stop, error] = std::from_chars(begin, end, result);
  CHORUS_CHECK_ARG(error == std::errc() && stop == end, "store key \"", key,
                   "\" holds a value that is not a decimal integer, so add() cannot update it");
  return result;
}

Bytes addToCounter(const std::string& key, const Bytes& current, int64_t delta, int64_t& result) {
  int64_t value = parseCounter(key, current);
  CHORUS_CHECK_ARG(!__builtin_add_overflow(value, delta, &result), "add(", delta,
                   ") to store key \"", key, "\" (value ", value, ") overflows int64");
  return toBytes(std::to_string(result));
}

}  // namespace chorus::store
