// Reading CHORUS_* and related environment variables. Malformed values are InvalidArgumentError
// naming the variable and the value.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace chorus::env {

std::optional<std::string> string(const char* name);
std::optional<long long> integer(const char* name);
// A number of seconds (may be fractional: "0.5").
std::optional<std::chrono::milliseconds> seconds(const char* name);

}  // namespace chorus::env
