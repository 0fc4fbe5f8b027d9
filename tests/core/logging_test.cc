// Logging (logging.h): threshold parsing from CHORUS_LOG_LEVEL, filtering and line format.
#include "core/logging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace chorus::log {
namespace {

// The threshold is read once per process, so each value is tried in a fresh child process
// (a "threadsafe" death test re-executes the binary). The child exits with the level it read.
TEST(LoggingDeathTest, ThresholdFromEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const struct {
    const char* value;
    Level level;
  } cases[] = {
      {"error", Level::kError}, {"WARN", Level::kWarn},   {"info", Level::kInfo},
      {"Debug", Level::kDebug}, {"trace", Level::kTrace}, {"warning", Level::kWarn},
      {"", Level::kWarn},
  };
  for (const auto& c : cases) {
    setenv("CHORUS_LOG_LEVEL", c.value, 1);
    EXPECT_EXIT(std::_Exit(static_cast<int>(threshold())),
                ::testing::ExitedWithCode(static_cast<int>(c.level)), "")
        << "CHORUS_LOG_LEVEL=" << c.value;
  }
  unsetenv("CHORUS_LOG_LEVEL");
  EXPECT_EXIT(std::_Exit(static_cast<int>(threshold())),
              ::testing::ExitedWithCode(static_cast<int>(Level::kWarn)), "");
  setenv("CHORUS_LOG_LEVEL", "loud", 1);
  EXPECT_EXIT(std::_Exit(static_cast<int>(threshold())),
              ::testing::ExitedWithCode(static_cast<int>(Level::kWarn)),
              "\\[chorus\\] warn: CHORUS_LOG_LEVEL=\"loud\" is not one of error, warn");
  unsetenv("CHORUS_LOG_LEVEL");
}

// Captures what is written to stderr (fd 2) while in scope.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    file_ = std::tmpfile();
    dup2(fileno(file_), STDERR_FILENO);
  }
  ~StderrCapture() {
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    std::fclose(file_);
  }
  std::string text() {
    std::string result;
    std::rewind(file_);
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, file_)) > 0) {
      result.append(buffer, n);
    }
    return result;
  }

 private:
  int saved_;
  std::FILE* file_;
};

TEST(LoggingTest, FiltersAndFormatsLines) {
  Level saved = threshold();
  setThreshold(Level::kInfo);
  std::string text;
  {
    StderrCapture capture;
    setLogRank(-1);
    CHORUS_LOG(kInfo) << "connected to " << 3 << " peers";
    CHORUS_LOG(kDebug) << "hidden";
    setLogRank(5);
    CHORUS_LOG(kError) << "boom\n";
    write(Level::kTrace, "hidden too");
    write(Level::kWarn, "careful");
    text = capture.text();
  }
  setThreshold(saved);
  setLogRank(-1);
  EXPECT_EQ(text,
            "[chorus] info: connected to 3 peers\n"
            "[chorus rank 5] error: boom\n"
            "[chorus rank 5] warn: careful\n");
}

TEST(LoggingTest, EnabledFollowsThreshold) {
  Level saved = threshold();
  setThreshold(Level::kError);
  EXPECT_TRUE(enabled(Level::kError));
  EXPECT_FALSE(enabled(Level::kWarn));
  setThreshold(Level::kTrace);
  EXPECT_TRUE(enabled(Level::kTrace));
  EXPECT_EQ(threshold(), Level::kTrace);
  setThreshold(saved);
}

TEST(LoggingTest, ArgumentsAreNotEvaluatedWhenDisabled) {
  Level saved = threshold();
  setThreshold(Level::kError);
  int evaluated = 0;
  CHORUS_LOG(kDebug) << ++evaluated;
  EXPECT_EQ(evaluated, 0);
  setThreshold(saved);
}

}  // namespace
}  // namespace chorus::log
