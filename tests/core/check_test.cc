// The check macros of check.h and the system-error message of error.cc.
#include "core/check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace chorus {
namespace {

TEST(CheckTest, SysCheckNamesCallErrnoTextAndLocation) {
  try {
    CHORUS_SYSCHECK(::close(-1));
    FAIL() << "no exception";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("::close(-1)"), std::string::npos) << message;
    EXPECT_NE(message.find("Bad file descriptor"), std::string::npos) << message;
    EXPECT_NE(message.find("errno 9"), std::string::npos) << message;
    EXPECT_NE(message.find("tests/core/check_test.cc:"), std::string::npos) << message;
  }
}

TEST(CheckTest, SysCheckPassesOnSuccess) {
  int fds[2];
  CHORUS_SYSCHECK(::pipe(fds));
  CHORUS_SYSCHECK(::close(fds[0]));
  CHORUS_SYSCHECK(::close(fds[1]));
}

TEST(CheckTest, CheckArgAndAssert) {
  EXPECT_NO_THROW(CHORUS_CHECK_ARG(1 + 1 == 2, "math"));
  try {
    CHORUS_CHECK_ARG(false, "root ", 7, " is outside the group of ", 4, " ranks");
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(), "root 7 is outside the group of 4 ranks");
  }
  try {
    CHORUS_ASSERT(2 < 1);
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("2 < 1"), std::string::npos);
  }
}

}  // namespace
}  // namespace chorus
