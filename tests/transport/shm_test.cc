// Tests of what the conformance suite does not cover for the shm transport: messages far larger
// than a ring, many tags interleaved through one ring, no name left in /dev/shm, an idle wait that
// sleeps, and a real peer process killed with SIGKILL. Expected bytes are closed forms of rank,
// tag and index; every wait has a deadline.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/cross_memory.h"
#include "core/shared_memory.h"
#include "store/file_store.h"
#include "transport/shm/transport.h"
#include "transport_group.h"

namespace chorus::transport::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Deadline soon() { return Deadline::after(seconds(20)); }

// Byte `index` of the message that `rank` sends with `tag`: a closed form.
uint8_t patternByte(int rank, uint64_t tag, size_t index) {
  return static_cast<uint8_t>((index * 131 + (index >> 12) * 7 + tag * 29 + rank * 57) & 0xff);
}

std::vector<uint8_t> pattern(int rank, uint64_t tag, size_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = patternByte(rank, tag, i);
  return data;
}

// The first index where `data` differs from the pattern, or -1.
long long firstWrongByte(const std::vector<uint8_t>& data, int rank, uint64_t tag) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != patternByte(rank, tag, i))
      return static_cast<long long>(i);
  }
  return -1;
}

void expectAllOk(const std::vector<std::exception_ptr>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank])
      continue;
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const std::exception& error) {
      ADD_FAILURE() << "rank " << rank << " failed: " << error.what();
    }
  }
}

// Names in /dev/shm that start with `segmentPrefix` (this process's by default).
std::vector<std::string> leftoverNames(std::string segmentPrefix = detail::shmSegmentPrefix()) {
  std::string prefix = segmentPrefix.substr(1);  // without the leading '/'
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr)
    return names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0)
      names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

// Ranks 0 and 1 send each other 64 MiB (64 times a ring) at once, checked byte for byte.
TEST(ShmTransport, MessagesFarLargerThanTheRingBothWays) {
  constexpr size_t kBytes = size_t{64} << 20;
  auto group = makeGroup("shm", 2);
  auto errors = runRanks(group, [&](Transport& t) {
    const int peer = 1 - t.rank();
    auto out = pattern(t.rank(), 3, kBytes);
    std::vector<uint8_t> in(kBytes, 0);
    Request requests[2];
    t.postSend(peer, 3, stamp(1, kBytes), out.data(), kBytes, requests[0]);
    t.postRecv(peer, 3, stamp(1, kBytes), in.data(), kBytes, requests[1]);
    Request* both[] = {&requests[0], &requests[1]};
    t.wait(both, soon());
    EXPECT_EQ(firstWrongByte(in, peer, 3), -1);
  });
  expectAllOk(errors);
}

// Whether the shm transport reads large messages directly here: allowed, and the kernel lets this
// process read memory with process_vm_readv (it refuses under some sandboxes).
bool directReadsWork() {
  static const uint64_t word = 0x5eed;
  return detail::CrossMemoryReader::enabled() &&
         detail::CrossMemoryReader::canRead(::getpid(), reinterpret_cast<uintptr_t>(&word), word);
}

// Note [Direct messages]: a receiver that closes right after reading a direct message leaves its
// sender's send completed, not failed for the goodbye, though the sender first looks after it.
TEST(ShmTransport, ADirectSendReadJustBeforeItsReceiverClosesCompletes) {
  if (!directReadsWork())
    GTEST_SKIP() << "direct reads are off (CHORUS_SHM_DIRECT=0) or refused here";
  constexpr size_t kBytes = size_t{4} << 20;  // more than a ring: direct
  auto group = makeGroup("shm", 2);
  Signal closed;
  auto errors = runRanks(group, [&](Transport& t) {
    Request request;
    Request* one[] = {&request};
    if (t.rank() == 1) {
      std::vector<uint8_t> in(kBytes, 0);
      t.postRecv(0, 5, stamp(1, kBytes), in.data(), kBytes, request);
      t.wait(one, soon());
      EXPECT_EQ(firstWrongByte(in, 0, 5), -1);
      t.close();
      closed.set();
      return;
    }
    auto out = pattern(0, 5, kBytes);
    t.postSend(1, 5, stamp(1, kBytes), out.data(), kBytes, request);
    closed.wait();
    t.wait(one, soon());  // finds the goodbye, and the read that came before it
  });
  expectAllOk(errors);
}

// A sender that closes with a direct send outstanding revokes it: the receiver delivers nothing
// (though the sender's buffer is still there to read) and its receive fails for the goodbye.
TEST(ShmTransport, ADirectSendAbandonedByItsSendersCloseIsNeverDelivered) {
  if (!directReadsWork())
    GTEST_SKIP() << "direct reads are off (CHORUS_SHM_DIRECT=0) or refused here";
  constexpr size_t kBytes = size_t{4} << 20;
  auto group = makeGroup("shm", 2);
  Signal closed;
  const auto out = pattern(0, 6, kBytes);  // lives through the test
  auto errors = runRanks(group, [&](Transport& t) {
    Request request;
    Request* one[] = {&request};
    if (t.rank() == 0) {
      t.postSend(1, 6, stamp(1, kBytes), out.data(), kBytes, request);
      t.close();
      closed.set();
      return;
    }
    closed.wait();
    std::vector<uint8_t> in(kBytes, 0);
    t.postRecv(0, 6, stamp(1, kBytes), in.data(), kBytes, request);
    EXPECT_THROW(t.wait(one, soon()), PeerError);
    EXPECT_EQ(std::count(in.begin(), in.end(), uint8_t{0}), static_cast<long>(kBytes));
  });
  expectAllOk(errors);
}

// Rank 1 sends kPerTag messages on each of kTags tags, interleaved (some larger than a ring);
// rank 0 posts its receives tag by tag in reverse order, so most messages wait in the
// unexpected-message buffer and a large one must not hold back the tags behind it.
TEST(ShmTransport, ManyTagsInterleavedThroughOneRing) {
  constexpr int kTags = 12;
  constexpr int kPerTag = 6;
  auto bytesOf = [](int tag, int index) -> size_t {
    if ((tag + index) % 7 == 0)
      return (size_t{3} << 20) + tag * 1000 + index;  // three rings' worth
    return static_cast<size_t>((tag * 977 + index * 131) % 5000);
  };
  auto group = makeGroup("shm", 2);
  auto errors = runRanks(group, [&](Transport& t) {
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<Request> requests(kTags * kPerTag);
    std::vector<Request*> all;
    for (int index = 0; index < kPerTag; ++index) {
      for (int tag = 0; tag < kTags; ++tag) {
        size_t bytes = bytesOf(tag, index);
        Request& request = requests[index * kTags + tag];
        // A different message on each (tag, index): the index is part of the pattern's tag.
        uint64_t key = static_cast<uint64_t>(tag) * 100 + index;
        if (t.rank() == 1) {
          buffers.push_back(pattern(1, key, bytes));
          t.postSend(0, tag, stamp(9, bytes), buffers.back().data(), bytes, request);
        }
        all.push_back(&request);
      }
    }
    if (t.rank() == 0) {
      buffers.resize(kTags * kPerTag);
      for (int tag = kTags - 1; tag >= 0; --tag) {
        for (int index = 0; index < kPerTag; ++index) {
          size_t bytes = bytesOf(tag, index);
          auto& buffer = buffers[index * kTags + tag];
          buffer.assign(bytes, 0);
          t.postRecv(1, tag, stamp(9, bytes), buffer.data(), bytes, requests[index * kTags + tag]);
        }
      }
    }
    t.wait(all, soon());
    if (t.rank() == 0) {
      for (int index = 0; index < kPerTag; ++index) {
        for (int tag = 0; tag < kTags; ++tag) {
          uint64_t key = static_cast<uint64_t>(tag) * 100 + index;
          EXPECT_EQ(firstWrongByte(buffers[index * kTags + tag], 1, key), -1)
              << "tag " << tag << " message " << index;
        }
      }
    }
  });
  expectAllOk(errors);
}

TEST(ShmTransport, NoSegmentNameIsLeftInDevShm) {
  ASSERT_EQ(leftoverNames(), std::vector<std::string>{});
  {
    auto group = makeGroup("shm", 4);
    EXPECT_EQ(leftoverNames(), std::vector<std::string>{}) << "after the group formed";
    // Still connected without the names: a message goes around the ring of ranks.
    auto errors = runRanks(group, [&](Transport& t) {
      int out = t.rank(), in = -1;
      Request requests[2];
      t.postSend((t.rank() + 1) % 4, 0, stamp(), &out, 4, requests[0]);
      t.postRecv((t.rank() + 3) % 4, 0, stamp(), &in, 4, requests[1]);
      Request* both[] = {&requests[0], &requests[1]};
      t.wait(both, soon());
      EXPECT_EQ(in, (t.rank() + 3) % 4);
    });
    expectAllOk(errors);
  }
  EXPECT_EQ(leftoverNames(), std::vector<std::string>{}) << "after the group was destroyed";
}

TEST(ShmTransport, SegmentPrefixFollowsTheJobId) {
  const char* saved = std::getenv("CHORUS_JOB_ID");
  std::string before = saved ? saved : "";
  ::setenv("CHORUS_JOB_ID", "1f2e3d", 1);
  EXPECT_EQ(detail::shmSegmentPrefix(), "/chorus-1f2e3d-");
  ::setenv("CHORUS_JOB_ID", "../etc", 1);
  EXPECT_THROW(detail::shmSegmentPrefix(), InvalidArgumentError);
  ::unsetenv("CHORUS_JOB_ID");
  EXPECT_EQ(detail::shmSegmentPrefix(), "/chorus-p" + std::to_string(::getpid()) + "-");
  if (saved != nullptr)
    ::setenv("CHORUS_JOB_ID", before.c_str(), 1);
}

// A wait on a message that never comes sleeps on the futex instead of spinning.
TEST(ShmTransport, IdleWaitDoesNotBurnACore) {
  const auto used = cpuTimeOfAnIdleWait("shm");
  // Spinning would use ~500 ms; sleeping in 50 ms slices uses a few ms.
  EXPECT_LT(used, std::chrono::microseconds(100000)) << used.count() << " us of CPU";
}

// --- A real peer process killed with SIGKILL ---

// Exit codes of a surviving child.
enum Outcome { kPass = 0, kNoError = 10, kWrongError = 11, kWrongPeer = 12, kTooSlow = 13 };
constexpr int kVictim = 1;

// The pipes between the parent and its children.
struct Pipes {
  int ready[2];     // the victim writes a byte once it is connected
  int results[2];   // each survivor writes its rank and Outcome
  int release[2];   // the parent closes it once every result is in; survivors then exit
  int closeNow[2];  // a closer (see runChild) closes its transport once the parent closes this
};

// Rank `rank` of `size`, in a forked child: forms the group through a FileStore at `path` and
// waits on a receive that never comes. The victim (rank 1) waits on rank 0 and tells the parent it
// is connected; with two ranks rank 0 waits on the victim, with three ranks 0 and 2 wait on each
// other, so they must notice the death of a rank they are not waiting on. A survivor reports, then
// stays alive without closing until released, so no survivor's exit disturbs another. With
// `closer`, rank 0 of three is the closer: it waits on nothing, and once the parent has reaped the
// victim it closes its transport at once (as a rank does that failed over the death), while rank
// 2 waits on it.
[[noreturn]] void runChild(
    int rank, int size, const std::string& path, const Pipes& pipes, bool closer) {
  ::alarm(30);  // a hung child dies instead of hanging the test
  ::close(pipes.release[1]);
  ::close(pipes.closeNow[1]);
  int outcome = kNoError;
  std::unique_ptr<Transport> transport;
  try {
    transport::TransportOptions options;
    options.rank = rank;
    options.size = size;
    options.store = std::make_shared<store::FileStore>(path);
    options.deadline = Deadline::after(seconds(15));
    transport = shm::createShmTransport(options);
    if (closer && rank == 0) {
      char end = 0;
      (void)::read(pipes.closeNow[0], &end, 1);  // EOF once the victim is reaped
      transport.reset();                         // says goodbye
      uint8_t result[2] = {0, kPass};
      (void)::write(pipes.results[1], result, 2);
      (void)::read(pipes.release[0], &end, 1);
      std::_Exit(0);
    }
    int waitOn = rank == kVictim ? 0 : size == 2 ? kVictim : 2 - rank;
    int value = 0;
    Request request;
    transport->postRecv(waitOn, 0, stamp(), &value, 4, request);
    Request* one[] = {&request};
    if (rank == kVictim) {
      char ready = 1;
      (void)::write(pipes.ready[1], &ready, 1);
    }
    auto start = Clock::now();
    try {
      transport->wait(one, Deadline::after(seconds(20)));
    } catch (const PeerError& error) {
      std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
      bool named = std::string(error.what()).find("rank 1 closed its connection unexpectedly") !=
                   std::string::npos;
      outcome = error.peerRank() != kVictim || !named ? kWrongPeer
                : Clock::now() - start > seconds(2)   ? kTooSlow
                                                      : kPass;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "rank %d: wrong error: %s\n", rank, error.what());
      outcome = kWrongError;
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d: setup failed: %s\n", rank, error.what());
    outcome = kWrongError;
  }
  uint8_t result[2] = {static_cast<uint8_t>(rank), static_cast<uint8_t>(outcome)};
  (void)::write(pipes.results[1], result, 2);
  char end = 0;
  (void)::read(pipes.release[0], &end, 1);  // EOF once the parent has every result
  std::_Exit(0);
}

// Forks `size` ranks, SIGKILLs rank 1 once it waits, and expects every other rank to fail with
// PeerError naming it within 2 s, leaving no name in /dev/shm. `closer`: see runChild.
void killOneOf(int size, bool closer = false) {
  char directory[] = "/tmp/chorus-shm-test-XXXXXX";
  ASSERT_NE(::mkdtemp(directory), nullptr);
  std::string path = std::string(directory) + "/store";
  Pipes pipes{};
  ASSERT_EQ(::pipe(pipes.ready), 0);
  ASSERT_EQ(::pipe(pipes.results), 0);
  ASSERT_EQ(::pipe(pipes.release), 0);
  ASSERT_EQ(::pipe(pipes.closeNow), 0);
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0)
      runChild(rank, size, path, pipes, closer);
    children.push_back(child);
  }
  ::close(pipes.ready[1]);
  ::close(pipes.results[1]);
  char byte = 0;
  // Blocks until the victim is connected (or every child is gone: EOF).
  ssize_t got = ::read(pipes.ready[0], &byte, 1);
  ::close(pipes.ready[0]);
  std::this_thread::sleep_for(milliseconds(100));  // most likely inside wait() by now
  ::kill(children[kVictim], SIGKILL);
  int status = 0;
  ::waitpid(children[kVictim], &status, 0);  // reaped: kill(pid, 0) now says ESRCH
  ::close(pipes.closeNow[1]);                // the closer, if any, closes now
  ::close(pipes.closeNow[0]);
  // Every survivor reports (children die by alarm after 30 s at worst: then EOF).
  std::vector<int> outcomes(size, -1);
  uint8_t result[2];
  for (int reported = 0; reported < size - 1; ++reported) {
    if (::read(pipes.results[0], result, 2) != 2)
      break;
    outcomes[result[0] % size] = result[1];
  }
  ::close(pipes.results[0]);
  ::close(pipes.release[1]);
  ::close(pipes.release[0]);
  for (int rank = 0; rank < size; ++rank) {
    if (rank != kVictim)
      ::waitpid(children[rank], &status, 0);
  }
  ::unlink(path.c_str());
  ::rmdir(directory);
  ASSERT_EQ(got, 1) << "rank 1 never connected";
  for (int rank = 0; rank < size; ++rank) {
    if (rank == kVictim)
      continue;
    EXPECT_EQ(outcomes[rank], kPass)
        << "rank " << rank << ": -1 no report, 10 no error, 11 wrong error type, 12 wrong peer "
        << "named, 13 noticed after 2 s";
  }
  for (pid_t child : children) {
    std::string prefix = "/chorus-p" + std::to_string(child) + "-";
    EXPECT_EQ(leftoverNames(prefix), std::vector<std::string>{}) << prefix;
  }
}

TEST(ShmTransport, KilledPeerProcessFailsTheOtherWithPeerError) { killOneOf(2); }

TEST(ShmTransport, KilledPeerProcessFailsRanksWaitingOnOthers) { killOneOf(3); }

// Regression (issue 16, faults_killed_shm under load): rank 2 waits on rank 0, which closes right
// after rank 1's death. rank 2 must name the dead rank 1, not rank 0 for closing (Note [A
// departure after a death]): the goodbye reaches it well before its own next liveness check.
TEST(ShmTransport, ARankThatClosesAfterADeathIsNotBlamedForIt) { killOneOf(3, /*closer=*/true); }

}  // namespace
}  // namespace chorus::transport::testing
