// Typed environment variables (env.h): values, unset/empty, and malformed input.
#include "core/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "chorus/error.h"

namespace chorus::env {
namespace {

constexpr const char* kName = "CHORUS_CORE_TEST_VARIABLE";

class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kName); }
  static void set(const char* value) { setenv(kName, value, 1); }
};

TEST_F(EnvTest, UnsetAndEmptyAreNullopt) {
  unsetenv(kName);
  EXPECT_FALSE(string(kName));
  EXPECT_FALSE(integer(kName));
  EXPECT_FALSE(seconds(kName));
  set("");
  EXPECT_FALSE(string(kName));
  EXPECT_FALSE(integer(kName));
  EXPECT_FALSE(seconds(kName));
}

TEST_F(EnvTest, Strings) {
  set("shm");
  EXPECT_EQ(string(kName), "shm");
}

TEST_F(EnvTest, Integers) {
  set("42");
  EXPECT_EQ(integer(kName), 42);
  set(" -7 ");
  EXPECT_EQ(integer(kName), -7);
  set("+9223372036854775807");
  EXPECT_EQ(integer(kName), 9223372036854775807LL);
}

TEST_F(EnvTest, MalformedIntegersThrowNamingVariableAndValue) {
  for (const char* bad :
       {"abc", "12abc", "1.5", "0x10", "-", "+-5", "++5", "99999999999999999999", " "}) {
    set(bad);
    try {
      integer(kName);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const InvalidArgumentError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(kName), std::string::npos) << message;
      EXPECT_NE(message.find(bad), std::string::npos) << message;
    }
  }
}

TEST_F(EnvTest, Seconds) {
  set("300");
  EXPECT_EQ(seconds(kName), std::chrono::milliseconds(300000));
  set("0.5");
  EXPECT_EQ(seconds(kName), std::chrono::milliseconds(500));
  set("0");
  EXPECT_EQ(seconds(kName), std::chrono::milliseconds(0));
  set("1e-3");
  EXPECT_EQ(seconds(kName), std::chrono::milliseconds(1));
}

TEST_F(EnvTest, MalformedSecondsThrow) {
  for (const char* bad : {"-1", "soon", "5s", "inf", "nan", "1e300", "+-1"}) {
    set(bad);
    EXPECT_THROW(seconds(kName), InvalidArgumentError) << bad;
  }
}

}  // namespace
}  // namespace chorus::env
