// AlignedBuffer (parallel/aligned_buffer.h): zeroed at birth, and discard(): its whole pages leave
// memory (mincore(2) says so, independently of the buffer), reads there give zeros, the edges
// keep their bytes, and the buffer is usable again at the same address.
#include "parallel/aligned_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace chorus::parallel {
namespace {

size_t pageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Bytes of the whole pages in [data, data + bytes) that are in memory now.
size_t residentBytes(const void* data, size_t bytes) {
  const size_t page = pageBytes();
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t end = (start + bytes) / page * page;
  if (end <= first)
    return 0;
  std::vector<unsigned char> flags((end - first) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(first), end - first, flags.data()), 0);
  size_t resident = 0;
  for (unsigned char f : flags) resident += (f & 1) ? page : 0;
  return resident;
}

TEST(AlignedBuffer, DiscardReturnsItsWholePagesAndStaysUsableAtTheSameAddress) {
  const size_t page = pageBytes();
  for (size_t bytes : {size_t{3} * 1024 * 1024 + 100, size_t{64} * page + 7}) {
    SCOPED_TRACE(bytes);
    AlignedBuffer buffer(bytes, "test");
    auto* data = buffer.as<unsigned char>();
    void* address = buffer.data();
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(data[i], 0) << "byte " << i;  // zeroed
    std::memset(data, 0xAB, bytes);
    ASSERT_GE(residentBytes(data, bytes), bytes - 2 * page);

    const size_t discarded = buffer.discard();
    EXPECT_GE(discarded, bytes - 2 * page);
    EXPECT_LE(discarded, bytes);
    EXPECT_EQ(residentBytes(data, bytes), 0u);  // read nothing yet: no page came back

    // Whole pages read zeros now; the bytes before the first whole page and after the last keep
    // their values (they share a page with other memory).
    const auto start = reinterpret_cast<uintptr_t>(data);
    const size_t head = (page - start % page) % page;
    for (size_t i = 0; i < bytes; ++i) {
      bool inWholePage = i >= head && i < head + discarded;
      ASSERT_EQ(data[i], inWholePage ? 0 : 0xAB) << "byte " << i;
    }
    std::memset(data, 0x5C, bytes);  // usable again, where it was
    EXPECT_EQ(buffer.data(), address);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(data[i], 0x5C) << "byte " << i;
    EXPECT_GE(residentBytes(data, bytes), bytes - 2 * page);
  }
}

TEST(AlignedBuffer, DiscardOfLessThanAWholePageReturnsNothing) {
  AlignedBuffer buffer(100, "test");
  std::memset(buffer.data(), 0x11, 100);
  EXPECT_EQ(buffer.discard(), 0u);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(buffer.as<unsigned char>()[i], 0x11);
}

}  // namespace
}  // namespace chorus::parallel
