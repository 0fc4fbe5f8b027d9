// Typed reads of environment variables (env.h). An unset or empty variable is std::nullopt;
// surrounding blanks are ignored; anything else that does not parse completely is an
// InvalidArgumentError naming the variable, its value and what was expected.
#include "core/env.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "core/check.h"

namespace chorus::env {
namespace {

std::string_view trim(std::string_view text) {
  constexpr std::string_view kBlanks = " \t\r\n";
  size_t begin = text.find_first_not_of(kBlanks);
  if (begin == std::string_view::npos) {
    return {};
  }
  size_t end = text.find_last_not_of(kBlanks);
  return text.substr(begin, end - begin + 1);
}

[[noreturn]] void throwMalformed(const char* name, const std::string& value, const char* expected) {
  throw InvalidArgumentError(detail::concat("environment variable ", name, "=\"", value,
                                            "\" is not ", expected, "; fix or unset it"));
}

// from_chars takes "-5" but not "+5"; accept a single leading '+' before a digit or point.
std::string_view withoutPlusSign(std::string_view text) {
  if (text.size() >= 2 && text[0] == '+' && text[1] != '-' && text[1] != '+') {
    text.remove_prefix(1);
  }
  return text;
}

}  // namespace

std::optional<std::string> string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string(value);
}

std::optional<long long> integer(const char* name) {
  auto value = string(name);
  if (!value) {
    return std::nullopt;
  }
  std::string_view text = trim(*value);
  text = withoutPlusSign(text);
  long long result = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), result);
  if (error == std::errc::result_out_of_range) {
    throwMalformed(name, *value, "an integer in range");
  }
  if (error != std::errc() || end != text.data() + text.size()) {
    throwMalformed(name, *value, "an integer");
  }
  return result;
}

std::optional<std::chrono::milliseconds> seconds(const char* name) {
  auto value = string(name);
  if (!value) {
    return std::nullopt;
  }
  std::string_view text = trim(*value);
  text = withoutPlusSign(text);
  double result = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), result);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(result) || result < 0 || result > 1e12) {
    throwMalformed(name, *value, "a non-negative number of seconds (for example 300 or 0.5)");
  }
  return std::chrono::milliseconds(std::llround(result * 1000.0));
}

}  // namespace chorus::env
