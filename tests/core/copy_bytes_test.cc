// copyBytes (core/copy_bytes.h): every byte arrives and nothing around the destination changes,
// for sizes around the vector loop's 64-byte steps and glibc's `rep movsb` range, at every
// destination-minus-source distance (modulo a page) that chooses one way or the other. The
// choice itself is pinned at its edges: the slow window of Note [rep movsb and 4 KiB aliasing]
// is distances 1-63 from 2 KiB up.
#include "core/copy_bytes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace chorus::test {
namespace {

constexpr size_t kPage = 4096;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

// A page-aligned buffer of `bytes` bytes, each set to `fill`.
std::unique_ptr<std::byte, FreeDeleter> pageAligned(size_t bytes, std::byte fill) {
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  std::unique_ptr<std::byte, FreeDeleter> buffer(
      static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  std::fill_n(buffer.get(), rounded, fill);
  return buffer;
}

std::byte patternAt(size_t i) { return static_cast<std::byte>((i * 131 + 7) % 251); }

TEST(CopyBytes, CopiesEveryByteAndNothingElseAtEveryDistanceAndSize) {
  const std::vector<size_t> sizes = {1,    15,   63,   64,        65,        127,
                                     2047, 2048, 2049, 4096 + 13, 262144 + 5};
  const std::vector<size_t> distances = {0, 1, 8, 16, 31, 63, 64, 65, 2048, kPage - 1};
  constexpr size_t kSourceOffset = 16;  // as a NumPy array's data starts into its page
  constexpr std::byte kUntouched{0xEE};
  for (size_t bytes : sizes) {
    auto source = pageAligned(bytes + kSourceOffset, std::byte{0});
    for (size_t i = 0; i < bytes; ++i) source.get()[kSourceOffset + i] = patternAt(i);
    for (size_t distance : distances) {
      const size_t destinationOffset = (kSourceOffset + distance) % kPage;
      auto destination = pageAligned(destinationOffset + bytes + 64, kUntouched);
      std::byte* to = destination.get() + destinationOffset;
      copyBytes(to, source.get() + kSourceOffset, bytes);
      size_t wrong = 0;
      for (size_t i = 0; i < bytes; ++i) wrong += to[i] != patternAt(i);
      EXPECT_EQ(wrong, 0u) << bytes << " bytes at distance " << distance;
      for (size_t i = 0; i < destinationOffset; ++i)
        ASSERT_EQ(destination.get()[i], kUntouched) << "byte " << i << " before the copy";
      for (size_t i = 0; i < 64; ++i)
        ASSERT_EQ(to[bytes + i], kUntouched) << "byte " << i << " after the copy";
    }
  }
}

TEST(CopyBytes, AcceptsAnEmptyCopyOfNullPointers) { copyBytes(nullptr, nullptr, 0); }

TEST(CopyBytes, TakesTheVectorLoopExactlyInTheSlowWindow) {
  alignas(kPage) static std::byte page[2 * kPage];
  const std::byte* source = page;
  // Distances 1..63 modulo a page, from 2 KiB up.
  EXPECT_TRUE(copyAvoidsMemcpy(page + 1, source, 2048));
  EXPECT_TRUE(copyAvoidsMemcpy(page + 16, source, 1 << 20));
  EXPECT_TRUE(copyAvoidsMemcpy(page + 63, source, 2048));
  EXPECT_TRUE(copyAvoidsMemcpy(page + kPage + 16, source, 2048));  // a page further: the same
  // memcpy everywhere else.
  EXPECT_FALSE(copyAvoidsMemcpy(page + 16, source, 2047));
  EXPECT_FALSE(copyAvoidsMemcpy(page, source, 2048));
  EXPECT_FALSE(copyAvoidsMemcpy(page + 64, source, 2048));
  EXPECT_FALSE(copyAvoidsMemcpy(page + kPage, source, 2048));
  EXPECT_FALSE(copyAvoidsMemcpy(source, page + 16, 2048));  // the destination behind the source
}

TEST(CopyBytes, TheVectorLoopCopiesEveryTail) {
  for (size_t bytes = 0; bytes <= 200; ++bytes) {
    std::vector<std::byte> from(bytes), to(bytes + 1, std::byte{0xEE});
    for (size_t i = 0; i < bytes; ++i) from[i] = patternAt(i);
    copyByVectors(to.data(), from.data(), bytes);
    for (size_t i = 0; i < bytes; ++i)
      ASSERT_EQ(to[i], patternAt(i)) << bytes << " bytes, byte " << i;
    ASSERT_EQ(to[bytes], std::byte{0xEE}) << bytes << " bytes: one byte too many";
  }
}

}  // namespace
}  // namespace chorus::test
