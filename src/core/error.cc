// Turning a failed system call (errno) into a chorus::Error (see CHORUS_SYSCHECK in check.h).
#include <cstring>
#include <string_view>

#include "core/check.h"

namespace chorus::detail {
namespace {

// strerror_r comes in two flavours: GNU returns the message, XSI fills the buffer.
[[maybe_unused]] const char* errorText(const char* result, const char* /*buffer*/) {
  return result;
}
[[maybe_unused]] const char* errorText(int result, const char* buffer) {
  return result == 0 ? buffer : "unknown error";
}

// "src/core/net/socket.cc" rather than the build machine's absolute path.
std::string_view shortPath(std::string_view file) {
  size_t best = std::string_view::npos;
  for (std::string_view root : {"/src/", "/include/", "/tests/", "/tools/", "/python/"}) {
    size_t at = file.rfind(root);
    if (at != std::string_view::npos && (best == std::string_view::npos || at > best)) {
      best = at;
    }
  }
  return best == std::string_view::npos ? file : file.substr(best + 1);
}

}  // namespace

void throwSystemError(const char* call, int error, const char* file, int line) {
  char buffer[256] = {};
  const char* text = errorText(strerror_r(error, buffer, sizeof buffer), buffer);
  throw Error(concat("system call ", call, " failed: ", text, " (errno ", error, ") at ",
                     shortPath(file), ":", line));
}

}  // namespace chorus::detail
