// inWorldRanks (runtime/world_rank_errors.h) and withRanksMapped (core/error_ranks.h) on their
// own: each error type's fields are mapped, other chorus errors keep their type with the prefix,
// the world's own order passes unchanged, and a group of more than 16 shows 16 members.
#include "runtime/world_rank_errors.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "chorus/error.h"

namespace chorus::detail {
namespace {

// Rethrows `error` and hands it to `check` as an E (a test failure if it is another type).
template <typename E, typename Check>
void expectAs(std::exception_ptr error, Check check) {
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    check(e);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong type: " << e.what();
  }
}

TEST(WorldRankErrors, FieldsAreMappedAndTheMapLeadsTheMessage) {
  const std::vector<int> members = {4, 1, 6};
  expectAs<PeerError>(
      inWorldRanks(std::make_exception_ptr(PeerError("rank 0: rank 2 died", 2)), members, 0),
      [](const PeerError& e) {
        EXPECT_EQ(e.peerRank(), 6);
        EXPECT_EQ(std::string(e.what()),
                  "world rank 4 (this process), in the group of world ranks [4, 1, 6] (numbered "
                  "0, 1, 2 below): rank 0: rank 2 died");
      });
  expectAs<TimeoutError>(
      inWorldRanks(std::make_exception_ptr(TimeoutError("late", std::vector<int>{1, 2})), members,
                   1),
      [](const TimeoutError& e) {
        EXPECT_EQ(e.missingRanks(), (std::vector<int>{1, 6}));
      });
  expectAs<MismatchError>(
      inWorldRanks(std::make_exception_ptr(MismatchError("differs", "count", {0, 2})), members, 0),
      [](const MismatchError& e) {
        EXPECT_EQ(e.field(), "count");
        EXPECT_EQ(e.ranks(), (std::vector<int>{4, 6}));
      });
  expectAs<UnsupportedError>(
      inWorldRanks(std::make_exception_ptr(UnsupportedError("no")), members, 2),
      [](const UnsupportedError& e) {
        EXPECT_NE(std::string(e.what()).find("world rank 6 (this process)"), std::string::npos);
      });
}

TEST(WorldRankErrors, TheWorldsOrderPassesUnchangedAndLargeGroupsShowSixteen) {
  auto original = std::make_exception_ptr(PeerError("as it was", 1));
  EXPECT_EQ(inWorldRanks(original, {0, 1, 2}, 0), original);
  std::vector<int> members(20);
  std::iota(members.begin(), members.end(), 100);
  expectAs<PeerError>(inWorldRanks(original, members, 0), [](const PeerError& e) {
    EXPECT_EQ(e.peerRank(), 101);
    const std::string what = e.what();
    EXPECT_NE(what.find("115, … (20 in all)"), std::string::npos) << what;
    EXPECT_EQ(what.find("116"), std::string::npos) << what;
  });
}

}  // namespace
}  // namespace chorus::detail
