// The shm backend through the front end, on ranks that are threads of this process: it is what
// "auto" picks on one node, its segments leave no name in /dev/shm once formed, and its native
// allreduce is right on both paths (small: data in the arrival round; chunked: 512 KiB chunks,
// odd tails, several calls in a row so the double-buffered slots alternate), checked against
// closed forms.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "backend/shm/shm_group.h"
#include "chorus/chorus.h"
#include "harness/run_ranks.h"
#include "store/hash_store.h"

namespace chorus {
namespace {

using chorus::testing::RankOptions;
using chorus::testing::runRanks;

// Names in /dev/shm that this process's shm segments would have.
std::vector<std::string> ourShmNames() {
  const char* job = std::getenv("CHORUS_JOB_ID");
  const std::string prefix =
      "chorus-" + (job != nullptr && *job ? std::string(job) : "p" + std::to_string(::getpid())) +
      "-";
  std::vector<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* entry = ::readdir(dir)) {
      if (std::string(entry->d_name).rfind(prefix, 0) == 0)
        names.emplace_back(entry->d_name);
    }
    ::closedir(dir);
  }
  return names;
}

TEST(ShmBackendTest, AutoPicksShmOnOneNodeAndLeavesNoNames) {
  runRanks(3, [](Communicator& comm) {
    EXPECT_EQ(comm.backendName(), "shm");
    comm.barrier()->wait();  // every rank's segments are mapped and unlinked by now
    if (comm.rank() == 0) {
      EXPECT_EQ(ourShmNames(), std::vector<std::string>{});
    }
    comm.barrier()->wait();
  });
}

// Rank r's int32 value at index i: small, so sums, products and extremes are exact.
int32_t valueAt(int rank, size_t i) { return static_cast<int32_t>((i * 7 + rank * 3) % 11) - 5; }

TEST(ShmBackendTest, AllreduceAcrossChunksAndCallsMatchesClosedForms) {
  constexpr int kRanks = 3;
  RankOptions options;
  options.backend = "shm";
  // Small-path limit (32 KiB of int32 = 8192), one past it, and three chunks plus an odd tail.
  const size_t counts[] = {8192, 8193, 3 * 131072 + 5, 7};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax};
  runRanks(
      kRanks,
      [&](Communicator& comm) {
        for (int round = 0; round < 2; ++round) {
          for (size_t count : counts) {
            for (ReduceOp op : ops) {
              std::vector<int32_t> data(count);
              for (size_t i = 0; i < count; ++i) data[i] = valueAt(comm.rank(), i);
              comm.allreduce(Tensor(data.data(), {static_cast<int64_t>(count)}), op)->wait();
              for (size_t i = 0; i < count; ++i) {
                int32_t expected = valueAt(0, i);
                for (int r = 1; r < kRanks; ++r) {
                  const int32_t v = valueAt(r, i);
                  expected = op == ReduceOp::kSum   ? expected + v
                             : op == ReduceOp::kMin ? std::min(expected, v)
                                                    : std::max(expected, v);
                }
                ASSERT_EQ(data[i], expected) << "count " << count << " element " << i;
              }
            }
          }
        }
      },
      options);
}

// Communicator::abort on one rank: the other, waiting in a barrier, fails with the aborting rank's
// error instead of waiting for its deadline.
TEST(ShmBackendTest, AbortOnOneRankFailsTheOtherPromptly) {
  RankOptions options;
  options.backend = "shm";
  options.timeout = std::chrono::seconds(30);
  const auto start = std::chrono::steady_clock::now();
  runRanks(
      2,
      [&](Communicator& comm) {
        comm.barrier()->wait();
        if (comm.rank() == 1) {
          comm.abort();
          return;
        }
        try {
          comm.barrier()->wait();
          ADD_FAILURE() << "rank 0 returned from a barrier rank 1 aborted";
        } catch (const PeerError& error) {
          EXPECT_NE(std::string(error.what()).find("aborted by"), std::string::npos)
              << error.what();
        }
      },
      options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// ShmGroup directly: a rank that closes (says goodbye) makes a peer waiting on it fail with
// PeerError naming it.
TEST(ShmGroupTest, WaitingOnAClosedPeerIsAPeerError) {
  auto store = std::make_shared<store::HashStore>();
  const Deadline setup = Deadline::after(std::chrono::seconds(10));
  auto make = [&](int rank) {
    return std::make_unique<backend::shm::ShmGroup>(rank, 2, detail::RankNames{}, store,
                                                    "closed-peer-test", setup);
  };
  auto other = std::async(std::launch::async, make, 1);
  auto group = make(0);
  other.get()->close();
  try {
    group->waitAll(backend::shm::Step::kArrived, 1, Deadline::after(std::chrono::seconds(10)));
    ADD_FAILURE() << "waiting on a closed peer returned";
  } catch (const PeerError& error) {
    EXPECT_EQ(error.peerRank(), 1);
    EXPECT_NE(std::string(error.what()).find("rank 1 has closed its communicator"),
              std::string::npos)
        << error.what();
  }
}

// Regression (issue 16, chorusrun_collectives_np7 under load): a rank that has published what a
// wait needs may close at once, and that must not fail the wait (see Note [Only needed peers fail
// a wait]). Rank 2 arrives and closes; rank 1 is alive but late. Before the fix rank 0's wait
// raised "rank 2 has closed its communicator"; it must time out naming rank 1 alone, and once
// rank 1 arrives, the wait must return.
TEST(ShmGroupTest, APeerThatClosesAfterPublishingDoesNotFailTheWait) {
  using backend::shm::ShmGroup;
  using backend::shm::Step;
  auto formGroups = [](const std::string& scope) {
    auto store = std::make_shared<store::HashStore>();
    const Deadline setup = Deadline::after(std::chrono::seconds(10));
    auto make = [&](int rank) {
      return std::make_unique<ShmGroup>(rank, 3, detail::RankNames{}, store, scope, setup);
    };
    auto one = std::async(std::launch::async, make, 1);
    auto two = std::async(std::launch::async, make, 2);
    std::vector<std::unique_ptr<ShmGroup>> groups;
    groups.push_back(make(0));
    groups.push_back(one.get());
    groups.push_back(two.get());
    return groups;
  };

  auto groups = formGroups("left-after-publishing");
  groups[0]->arrive(1, Fingerprint{}, nullptr, 0);
  groups[2]->arrive(1, Fingerprint{}, nullptr, 0);
  groups[2]->close();
  try {
    groups[0]->waitAll(Step::kArrived, 1, Deadline::after(std::chrono::milliseconds(300)));
    ADD_FAILURE() << "the wait returned although rank 1 never arrived";
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.missingRanks(), std::vector<int>{1}) << error.what();
  } catch (const Error& error) {
    ADD_FAILURE() << "expected a TimeoutError naming rank 1, got: " << error.what();
  }

  auto late = formGroups("left-after-publishing-2");
  late[0]->arrive(1, Fingerprint{}, nullptr, 0);
  late[2]->arrive(1, Fingerprint{}, nullptr, 0);
  late[2]->close();
  auto waiter = std::async(std::launch::async, [&] {
    late[0]->waitAll(Step::kArrived, 1, Deadline::after(std::chrono::seconds(20)));
  });
  // Not for correctness: only so that the waiter is likely asleep in its slow path, where the
  // closed peer used to be seen.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  late[1]->arrive(1, Fingerprint{}, nullptr, 0);
  EXPECT_NO_THROW(waiter.get());
}

// Direct reads (process_vm_readv): always allowed within one process, so two groups here agree to
// use them; a read copies from the peer's private memory; a bad address is an error naming the
// peer and the way out; CHORUS_SHM_DIRECT=0 turns them off on every rank.
TEST(ShmGroupTest, DirectReadsCopyFromAPeerAndCanBeTurnedOff) {
  const Deadline setup = Deadline::after(std::chrono::seconds(10));
  using Store = std::shared_ptr<store::Store>;
  auto make = [&](int rank, Store store) {
    return std::make_unique<backend::shm::ShmGroup>(rank, 2, detail::RankNames{}, store, "direct",
                                                    setup);
  };
  Store on = std::make_shared<store::HashStore>();
  auto other = std::async(std::launch::async, make, 1, on);
  auto group = make(0, on);
  auto peer = other.get();
  ASSERT_TRUE(group->directReads());
  EXPECT_TRUE(peer->directReads());
  std::vector<int64_t> source(300000), copy(300000, -1);  // several 2 MiB pieces
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<int64_t>(i * 31 + 7);
  group->readFrom(1, copy.data(), reinterpret_cast<uintptr_t>(source.data()),
                  source.size() * sizeof(int64_t));
  EXPECT_EQ(copy, source);
  try {
    group->readFrom(1, copy.data(), 8, 64);  // address 8 is never mapped
    ADD_FAILURE() << "reading an unmapped address returned";
  } catch (const InternalError& error) {
    EXPECT_NE(std::string(error.what()).find("from rank 1's buffer failed"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("CHORUS_SHM_DIRECT=0"), std::string::npos);
  }

  ::setenv("CHORUS_SHM_DIRECT", "0", 1);
  Store offStore = std::make_shared<store::HashStore>();
  auto offPeer = std::async(std::launch::async, make, 1, offStore);
  auto off = make(0, offStore);
  ::unsetenv("CHORUS_SHM_DIRECT");
  EXPECT_FALSE(off->directReads());
  EXPECT_FALSE(offPeer.get()->directReads());
}

// A read whose destination lies 1-63 bytes past its source modulo a page goes through the staging
// buffer (Note [rep movsb and 4 KiB aliasing]), in 64 KiB pieces: every byte must still arrive,
// nothing around the destination may change, at the window's edges, across several pieces and
// an odd tail, and from sources at odd offsets in their pages; a bad address is still an error.
TEST(ShmGroupTest, DirectReadsAtEveryDistanceCopyEveryByteAndNothingElse) {
  const Deadline setup = Deadline::after(std::chrono::seconds(10));
  using Store = std::shared_ptr<store::Store>;
  auto make = [&](int rank, Store store) {
    return std::make_unique<backend::shm::ShmGroup>(rank, 2, detail::RankNames{}, store, "staged",
                                                    setup);
  };
  Store store = std::make_shared<store::HashStore>();
  auto other = std::async(std::launch::async, make, 1, store);
  auto group = make(0, store);
  auto peer = other.get();
  ASSERT_TRUE(group->directReads());
  constexpr size_t kPage = 4096;
  constexpr size_t kBytes = 3 * 65536 + 13;
  constexpr std::byte kUntouched{0xEE};
  std::vector<std::byte> source(kBytes + 2 * kPage), target(kBytes + 3 * kPage);
  auto pageStart = [&](std::vector<std::byte>& v) {
    const auto address = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + (kPage - address % kPage) % kPage;
  };
  for (size_t sourceOffset : {size_t{0}, size_t{16}, size_t{4000}}) {
    const std::byte* from = pageStart(source) + sourceOffset;
    for (size_t i = 0; i < kBytes; ++i)
      pageStart(source)[sourceOffset + i] = static_cast<std::byte>((i * 131 + sourceOffset) % 251);
    for (size_t distance : {size_t{0}, size_t{1}, size_t{16}, size_t{63}, size_t{64}, kPage - 1}) {
      std::fill(target.begin(), target.end(), kUntouched);
      std::byte* to = pageStart(target) + kPage + (sourceOffset + distance) % kPage;
      group->readFrom(1, to, reinterpret_cast<uintptr_t>(from), kBytes);
      EXPECT_TRUE(std::equal(to, to + kBytes, from))
          << "source offset " << sourceOffset << ", distance " << distance;
      EXPECT_TRUE(std::all_of(target.data(), to, [&](std::byte b) { return b == kUntouched; }));
      EXPECT_TRUE(std::all_of(to + kBytes, target.data() + target.size(),
                              [&](std::byte b) { return b == kUntouched; }));
    }
  }
  std::byte* staged = pageStart(target) + 16;  // 16 bytes past address 0 modulo a page
  EXPECT_THROW(group->readFrom(1, staged, kPage, 8192), InternalError);  // never mapped
}

}  // namespace
}  // namespace chorus
