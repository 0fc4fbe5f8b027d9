// Leveled logging to stderr (logging.h). The threshold comes from CHORUS_LOG_LEVEL on first use
// (error, warn, info, debug or trace, any case; default warn; an unknown value keeps warn and says
// so once). Each line is assembled in memory and written with a single write(2), so lines from
// different threads and processes sharing a terminal do not interleave.
#include "core/logging.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace chorus::log {
namespace {

constexpr std::array<std::string_view, 5> kLevelNames = {"error", "warn", "info", "debug", "trace"};
constexpr int kUnset = -1;

std::atomic<int> thresholdLevel{kUnset};
std::atomic<int> logRank{-1};

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

void writeLine(std::string_view line) {
  while (!line.empty()) {
    ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      return;  // stderr is gone; logging must never fail the caller
    }
    line.remove_prefix(static_cast<size_t>(written));
  }
}

std::string formatLine(Level level, std::string_view message) {
  while (!message.empty() && message.back() == '\n') {
    message.remove_suffix(1);
  }
  std::string line = "[chorus";
  int rank = logRank.load(std::memory_order_relaxed);
  if (rank >= 0) {
    line += " rank ";
    line += std::to_string(rank);
  }
  line += "] ";
  auto index = static_cast<size_t>(level);
  line += index < kLevelNames.size() ? kLevelNames[index] : "log";
  line += ": ";
  line += message;
  line += '\n';
  return line;
}

Level levelFromEnvironment() {
  const char* value = std::getenv("CHORUS_LOG_LEVEL");
  if (value == nullptr || *value == '\0') {
    return Level::kWarn;
  }
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (equalsIgnoringCase(value, kLevelNames[i])) {
      return static_cast<Level>(i);
    }
  }
  if (equalsIgnoringCase(value, "warning")) {
    return Level::kWarn;
  }
  writeLine(formatLine(Level::kWarn, std::string("CHORUS_LOG_LEVEL=\"") + value +
                                         "\" is not one of error, warn, info, debug, trace; "
                                         "using warn"));
  return Level::kWarn;
}

}  // namespace

Level threshold() {
  int level = thresholdLevel.load(std::memory_order_acquire);
  if (level == kUnset) {
    int fromEnvironment = static_cast<int>(levelFromEnvironment());
    // A concurrent setThreshold() or first reader wins; either way all readers agree afterwards.
    thresholdLevel.compare_exchange_strong(level, fromEnvironment, std::memory_order_acq_rel);
    level = thresholdLevel.load(std::memory_order_acquire);
  }
  return static_cast<Level>(level);
}

void setThreshold(Level level) {
  thresholdLevel.store(static_cast<int>(level), std::memory_order_release);
}

bool enabled(Level level) { return static_cast<int>(level) <= static_cast<int>(threshold()); }

void setLogRank(int rank) { logRank.store(rank, std::memory_order_relaxed); }

void write(Level level, std::string_view message) {
  if (!enabled(level)) {
    return;
  }
  writeLine(formatLine(level, message));
}

}  // namespace chorus::log
