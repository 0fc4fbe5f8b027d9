// Errors carried between ranks keep their type, message and details (error_codec.h).
#include "core/error_codec.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus::detail {
namespace {

const std::string kPrefix = "rank 0 (this process): rank 2 aborted: ";

std::exception_ptr roundTrip(std::exception_ptr error) {
  return decodeError(encodeError(error), kPrefix, 2);
}

template <typename E>
E rethrowAs(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return e;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "wrong type: " << other.what();
  }
  throw std::logic_error("unreachable");
}

TEST(ErrorCodecTest, PlainTypesKeepTypeAndMessage) {
  auto check = [](auto original) {
    using E = decltype(original);
    E decoded = rethrowAs<E>(roundTrip(std::make_exception_ptr(original)));
    EXPECT_EQ(std::string(decoded.what()), kPrefix + original.what());
  };
  check(Error("generic failure"));
  check(InvalidArgumentError("bad root 7"));
  check(UnsupportedError("no bfloat16 on mpi"));
  check(InternalError("bug"));
  // Exactly the type, not a subclass caught as a base: a generic Error stays generic.
  auto generic = roundTrip(std::make_exception_ptr(Error("x")));
  EXPECT_THROW(
      {
        try {
          std::rethrow_exception(generic);
        } catch (const InvalidArgumentError&) {
          FAIL() << "decoded as InvalidArgumentError";
        }
      },
      Error);
}

TEST(ErrorCodecTest, TimeoutKeepsMissingRanks) {
  auto decoded = rethrowAs<TimeoutError>(
      roundTrip(std::make_exception_ptr(TimeoutError("timed out", {1, 5, 6}))));
  EXPECT_EQ(decoded.missingRanks(), (std::vector<int>{1, 5, 6}));
  EXPECT_EQ(std::string(decoded.what()), kPrefix + "timed out");
}

TEST(ErrorCodecTest, PeerKeepsPeerRank) {
  auto decoded =
      rethrowAs<PeerError>(roundTrip(std::make_exception_ptr(PeerError("peer died", 3))));
  EXPECT_EQ(decoded.peerRank(), 3);
  auto unknown =
      rethrowAs<PeerError>(roundTrip(std::make_exception_ptr(PeerError("peer died", -1))));
  EXPECT_EQ(unknown.peerRank(), -1);
}

TEST(ErrorCodecTest, MismatchKeepsFieldAndRanks) {
  auto decoded = rethrowAs<MismatchError>(
      roundTrip(std::make_exception_ptr(MismatchError("dtype differs", "dtype", {0, 3}))));
  EXPECT_EQ(decoded.field(), "dtype");
  EXPECT_EQ(decoded.ranks(), (std::vector<int>{0, 3}));
  EXPECT_EQ(std::string(decoded.what()), kPrefix + "dtype differs");
}

TEST(ErrorCodecTest, ForeignExceptionsBecomeInternal) {
  auto decoded =
      rethrowAs<InternalError>(roundTrip(std::make_exception_ptr(std::out_of_range("index 9"))));
  EXPECT_NE(std::string(decoded.what()).find("index 9"), std::string::npos);
  rethrowAs<InternalError>(roundTrip(std::make_exception_ptr(42)));
  rethrowAs<InternalError>(roundTrip(nullptr));
}

// withPrefix says where an error arose and changes nothing else: its rank fields are world ranks
// already (Note [One rank numbering]).
TEST(ErrorCodecTest, WithPrefixKeepsTypeAndFields) {
  const std::string where = "in the group of world ranks [2, 5]: ";
  auto peer = rethrowAs<PeerError>(
      withPrefix(std::make_exception_ptr(PeerError("rank 2: rank 5 died", 5)), where));
  EXPECT_EQ(peer.peerRank(), 5);
  EXPECT_EQ(std::string(peer.what()), where + "rank 2: rank 5 died");
  auto timeout = rethrowAs<TimeoutError>(
      withPrefix(std::make_exception_ptr(TimeoutError("late", std::vector<int>{5})), where));
  EXPECT_EQ(timeout.missingRanks(), std::vector<int>{5});
  auto mismatch = rethrowAs<MismatchError>(
      withPrefix(std::make_exception_ptr(MismatchError("differs", "count", {2, 5})), where));
  EXPECT_EQ(mismatch.field(), "count");
  EXPECT_EQ(mismatch.ranks(), (std::vector<int>{2, 5}));
  auto other = rethrowAs<UnsupportedError>(
      withPrefix(std::make_exception_ptr(UnsupportedError("no")), where));
  EXPECT_EQ(std::string(other.what()), where + "no");
  EXPECT_EQ(withPrefix(nullptr, where), nullptr);
}

TEST(ErrorCodecTest, EmptyMessagesAndDetails) {
  auto decoded =
      rethrowAs<MismatchError>(roundTrip(std::make_exception_ptr(MismatchError("", "", {}))));
  EXPECT_EQ(std::string(decoded.what()), kPrefix);
  EXPECT_TRUE(decoded.ranks().empty());
}

TEST(ErrorCodecTest, MalformedInputBecomesPeerErrorNamingSender) {
  auto encoded =
      encodeError(std::make_exception_ptr(MismatchError("dtype differs", "dtype", {0, 3})));
  std::vector<std::vector<uint8_t>> corrupt;
  for (size_t length = 0; length < encoded.size(); ++length) {  // every truncation
    corrupt.emplace_back(encoded.begin(), encoded.begin() + static_cast<ptrdiff_t>(length));
  }
  auto trailing = encoded;
  trailing.push_back(0);
  corrupt.push_back(trailing);
  auto badVersion = encoded;
  badVersion[0] = 99;
  corrupt.push_back(badVersion);
  auto badTag = encoded;
  badTag[1] = 200;
  corrupt.push_back(badTag);
  auto hugeLength = encoded;
  hugeLength[2] = hugeLength[3] = hugeLength[4] = hugeLength[5] = 0xff;
  corrupt.push_back(hugeLength);
  for (const auto& bytes : corrupt) {
    auto decoded = rethrowAs<PeerError>(decodeError(bytes, kPrefix, 5));
    EXPECT_EQ(decoded.peerRank(), 5);
    std::string message = decoded.what();
    EXPECT_EQ(message.rfind(kPrefix, 0), 0u) << message;
    EXPECT_NE(message.find("rank 5"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace chorus::detail
