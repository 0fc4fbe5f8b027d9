// Check macros: CHORUS_CHECK_ARG for caller mistakes, CHORUS_ASSERT for chorus bugs (on in
// release), CHORUS_SYSCHECK for system calls that set errno. Messages are built with operator<<.
#pragma once

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "chorus/error.h"

namespace chorus::detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throwSystemError(const char* call, int error, const char* file, int line);

}  // namespace chorus::detail

#define CHORUS_CHECK_ARG(cond, ...)                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      throw ::chorus::InvalidArgumentError(::chorus::detail::concat(__VA_ARGS__)); \
    }                                                                              \
  } while (0)

#define CHORUS_ASSERT(cond)                                                                   \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      throw ::chorus::InternalError(                                                          \
          ::chorus::detail::concat("internal error: ", #cond, " failed at ", __FILE__, ":",   \
                                   __LINE__, "; this is a bug in chorus, please report it")); \
    }                                                                                         \
  } while (0)

// Evaluates `call`; if it returns -1, throws chorus::Error naming the call and strerror(errno).
#define CHORUS_SYSCHECK(call)                                               \
  do {                                                                      \
    if ((call) == -1) {                                                     \
      ::chorus::detail::throwSystemError(#call, errno, __FILE__, __LINE__); \
    }                                                                       \
  } while (0)
