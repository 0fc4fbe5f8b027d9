// FileStore specifics beyond the Store contract: file mode, torn records, compaction, bad paths.
#include "store/file_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "chorus/error.h"

namespace chorus::store {
namespace {

using namespace std::chrono_literals;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("chorus_file_store_test_" + std::to_string(::getpid())))
                .string();
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

TEST_F(FileStoreTest, CreatesTheFileOwnerOnly) {
  mode_t old = ::umask(0);  // even with a permissive umask
  FileStore store(path_);
  ::umask(old);
  struct stat info {};
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

TEST_F(FileStoreTest, IgnoresAndRepairsATornRecord) {
  FileStore store(path_);
  store.set("a", toBytes("1"));
  {
    // A writer that died mid-append: a record header promising more bytes than follow.
    std::ofstream file(path_, std::ios::binary | std::ios::app);
    const char torn[] = {'S', 100, 0, 0, 0, 100, 0, 0, 0, 'x', 'y'};
    file.write(torn, sizeof(torn));
  }
  EXPECT_EQ(toString(store.get("a", Deadline::after(1s))), "1");
  store.set("b", toBytes("2"));
  FileStore reopened(path_);
  EXPECT_EQ(toString(reopened.get("a", Deadline::after(1s))), "1");
  EXPECT_EQ(toString(reopened.get("b", Deadline::after(1s))), "2");
  EXPECT_EQ(std::filesystem::file_size(path_), 2u * (9 + 1 + 1));  // the torn bytes are gone
}

TEST_F(FileStoreTest, CompactsOverwrittenKeys) {
  FileStore store(path_);
  for (int i = 0; i < 1000; ++i) store.set("key", toBytes(std::to_string(i)));
  EXPECT_EQ(toString(store.get("key", Deadline::after(1s))), "999");
  // One live key: at most 2 * 1 + 64 records of at most 9 + 3 + 3 bytes survive compaction.
  EXPECT_LE(std::filesystem::file_size(path_), (2u + 64u + 1u) * 15u);
  struct stat info {};
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);  // the compacted file is owner-only too
}

TEST_F(FileStoreTest, UnusablePathIsAnErrorNamingIt) {
  std::string bad = "/nonexistent-chorus-dir/store";
  try {
    FileStore store(bad);
    FAIL() << "opened a file in a missing directory";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(bad), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace chorus::store
