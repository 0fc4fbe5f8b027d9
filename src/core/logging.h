// Logging to stderr, filtered by CHORUS_LOG_LEVEL (error, warn, info, debug, trace; default warn).
//
//   CHORUS_LOG(kInfo) << "connected to " << peers << " peers";
//
// Lines look like "[chorus rank 3] warn: ...". The rank prefix is set once by the runtime
// (setLogRank). Thread-safe: each line is written with one write(2).
#pragma once

#include <sstream>
#include <string_view>

namespace chorus::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// The threshold, read from CHORUS_LOG_LEVEL on first use.
Level threshold();
void setThreshold(Level level);
bool enabled(Level level);
void setLogRank(int rank);
void write(Level level, std::string_view message);

class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  ~Line() { write(level_, stream_.str()); }
  template <typename T>
  Line& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace chorus::log

#define CHORUS_LOG(level)                                     \
  if (!::chorus::log::enabled(::chorus::log::Level::level)) { \
  } else                                                      \
    ::chorus::log::Line(::chorus::log::Level::level)
