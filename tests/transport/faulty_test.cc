// FaultyTransport (src/transport/faulty/): each fault, injected into a real tcp or shm group of
// rank threads, gives the receiving rank the error that names the faulty rank, and a fault's
// error reaches every rank of a larger group.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "transport/faulty/transport.h"
#include "transport_group.h"

namespace chorus::transport::testing {
namespace {

using faulty::Fault;
using faulty::FaultyTransport;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr size_t kElements = 256;  // 1 KiB messages
constexpr size_t kBytes = kElements * sizeof(float);

// Replaces `rank`'s transport in `group` by a FaultyTransport with `fault`.
void injectFault(Group& group, int rank, Fault fault) {
  group[rank] = std::make_unique<FaultyTransport>(std::move(group[rank]), fault);
}

std::vector<float> message(int index) {
  std::vector<float> values(kElements);
  std::iota(values.begin(), values.end(), static_cast<float>(1000 * index));
  return values;
}

void sendOne(Transport& t, int peer, const std::vector<float>& values, Deadline deadline) {
  Request request;
  t.postSend(peer, 7, stamp(1, kElements), values.data(), kBytes, request);
  Request* requests[] = {&request};
  t.wait(requests, deadline);
}

std::vector<float> recvOne(Transport& t, int peer, Deadline deadline) {
  std::vector<float> values(kElements, -1.0f);
  Request request;
  t.postRecv(peer, 7, stamp(1, kElements), values.data(), kBytes, request);
  Request* requests[] = {&request};
  t.wait(requests, deadline);
  return values;
}

// Rethrows `error` as E (a test failure if it is none or another type) and returns what() and the
// error itself through `check`.
template <typename E, typename Check>
void expectError(const std::exception_ptr& error, int rank, Check check) {
  if (!error) {
    ADD_FAILURE() << "rank " << rank << " did not fail";
    return;
  }
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    check(e, std::string(e.what()));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " failed with the wrong type: " << e.what();
  }
}

class FaultyTransportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultyTransportTest, DelayHoldsTheMessageAndDeliversItWhole) {
  Group group = makeGroup(GetParam(), 2);
  injectFault(group, 0, Fault{Fault::Kind::kDelay, 1, 0, milliseconds(300)});
  auto errors = runRanks(group, [](Transport& t) {
    if (t.rank() == 0) {
      auto start = Clock::now();
      sendOne(t, 1, message(0), Deadline::after(seconds(10)));
      EXPECT_GE(Clock::now() - start, milliseconds(300));
    } else {
      EXPECT_EQ(recvOne(t, 0, Deadline::after(seconds(10))), message(0));
    }
  });
  EXPECT_EQ(errors, std::vector<std::exception_ptr>(2));
}

// Jitter delays each message by its own random time, at most `delay`, and changes no byte: 20
// messages in a row arrive whole and in order.
TEST_P(FaultyTransportTest, JitterDeliversEveryMessageWholeAndInOrder) {
  Group group = makeGroup(GetParam(), 2);
  Fault jitter{Fault::Kind::kJitter, -1, 0, milliseconds(5)};
  jitter.seed = 7;
  injectFault(group, 0, jitter);
  auto errors = runRanks(group, [](Transport& t) {
    for (int i = 0; i < 20; ++i) {
      if (t.rank() == 0)
        sendOne(t, 1, message(i), Deadline::after(seconds(10)));
      else
        EXPECT_EQ(recvOne(t, 0, Deadline::after(seconds(10))), message(i)) << "message " << i;
    }
  });
  EXPECT_EQ(errors, std::vector<std::exception_ptr>(2));
}

TEST_P(FaultyTransportTest, DroppedMessageTimesOutTheReceiverNamingTheSender) {
  Group group = makeGroup(GetParam(), 2);
  injectFault(group, 0, Fault{Fault::Kind::kDrop, 1, kBytes});
  Signal received;
  auto errors = runRanks(group, [&](Transport& t) {
    if (t.rank() == 0) {
      sendOne(t, 1, message(0), Deadline::after(seconds(10)));  // passes
      sendOne(t, 1, message(1), Deadline::after(seconds(10)));  // dropped, "sent" here
      received.wait();
    } else {
      EXPECT_EQ(recvOne(t, 0, Deadline::after(seconds(10))), message(0));
      try {
        recvOne(t, 0, Deadline::after(milliseconds(500)));
      } catch (...) {
        received.set();
        throw;
      }
      received.set();
    }
  });
  EXPECT_EQ(errors[0], nullptr);
  expectError<TimeoutError>(errors[1], 1, [](const TimeoutError& e, const std::string& what) {
    EXPECT_EQ(e.missingRanks(), std::vector<int>{0}) << what;
    EXPECT_NE(what.find("waiting for rank 0;"), std::string::npos) << what;
  });
}

TEST_P(FaultyTransportTest, TruncatedMessageIsAByteCountMismatchOnBothSides) {
  Group group = makeGroup(GetParam(), 2);
  injectFault(group, 0, Fault{Fault::Kind::kTruncate, 1, 0});
  auto errors = runRanks(group, [](Transport& t) {
    if (t.rank() == 0) {
      sendOne(t, 1, message(0), Deadline::after(seconds(10)));
      recvOne(t, 1, Deadline::after(seconds(10)));  // rank 1's error arrives here
    } else {
      recvOne(t, 0, Deadline::after(seconds(10)));
    }
  });
  for (int rank : {0, 1}) {
    expectError<MismatchError>(errors[rank], rank, [](const MismatchError& e, const auto& what) {
      EXPECT_EQ(e.field(), "bytes") << what;
      EXPECT_NE(what.find("expected a message of 1024 bytes from rank 0 but rank 0 sent 512"),
                std::string::npos)
          << what;
    });
  }
}

TEST_P(FaultyTransportTest, CloseAfterTwoMessagesFailsTheThirdReceiveNamingTheSender) {
  Group group = makeGroup(GetParam(), 2);
  injectFault(group, 0, Fault{Fault::Kind::kClose, 1, 2 * kBytes});
  auto errors = runRanks(group, [](Transport& t) {
    for (int index = 0; index < 3; ++index) {
      if (t.rank() == 0)
        sendOne(t, 1, message(index), Deadline::after(seconds(10)));
      else
        EXPECT_EQ(recvOne(t, 0, Deadline::after(seconds(10))), message(index)) << index;
    }
  });
  EXPECT_NE(errors[0], nullptr);  // its own send after closing
  expectError<PeerError>(errors[1], 1, [](const PeerError& e, const std::string& what) {
    EXPECT_EQ(e.peerRank(), 0) << what;
    EXPECT_NE(what.find("rank 0 has closed its communicator"), std::string::npos) << what;
  });
}

TEST_P(FaultyTransportTest, CrashAfterOneMessageIsAPeerErrorOnEveryOtherRank) {
  Group group = makeGroup(GetParam(), 3);
  injectFault(group, 2, Fault{Fault::Kind::kCrash, -1, kBytes});
  auto errors = runRanks(group, [](Transport& t) {
    if (t.rank() == 2) {
      sendOne(t, 0, message(0), Deadline::after(seconds(10)));
      sendOne(t, 1, message(1), Deadline::after(seconds(10)));  // crashes instead
    } else if (t.rank() == 0) {
      EXPECT_EQ(recvOne(t, 2, Deadline::after(seconds(10))), message(0));
    } else {
      recvOne(t, 2, Deadline::after(seconds(10)));  // throws: rank 2 crashed instead of sending
    }
  });
  expectError<PeerError>(errors[1], 1, [](const PeerError& e, const std::string& what) {
    EXPECT_EQ(e.peerRank(), 2) << what;
  });
  // Rank 0 had its message before the crash; it may still see the crash (shm fails the whole
  // transport as soon as anyone notices), but only as rank 2's.
  if (errors[0] != nullptr) {
    expectError<PeerError>(errors[0], 0, [](const PeerError& e, const std::string& what) {
      EXPECT_EQ(e.peerRank(), 2) << what;
    });
  }
}

// CHORUS_FAULT_DELAY_MS (what the soak tests set, tests/soak/): unset or 0 is no fault, N is jitter
// of at most N ms seeded by the rank, and anything else is an InvalidArgumentError naming it.
TEST(FaultFromEnvironment, DelayMillisecondsBecomeJitterSeededByTheRank) {
  ::unsetenv("CHORUS_FAULT_DELAY_MS");
  EXPECT_FALSE(faulty::faultFromEnvironment(0).has_value());
  ::setenv("CHORUS_FAULT_DELAY_MS", "0", 1);
  EXPECT_FALSE(faulty::faultFromEnvironment(0).has_value());
  ::setenv("CHORUS_FAULT_DELAY_MS", "7", 1);
  auto fault = faulty::faultFromEnvironment(3);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->kind, Fault::Kind::kJitter);
  EXPECT_EQ(fault->delay, milliseconds(7));
  EXPECT_EQ(fault->peer, -1);
  EXPECT_EQ(fault->seed, 4u);
  ::setenv("CHORUS_FAULT_DELAY_MS", "-2", 1);
  EXPECT_THROW(faulty::faultFromEnvironment(0), InvalidArgumentError);
  ::unsetenv("CHORUS_FAULT_DELAY_MS");
}

INSTANTIATE_TEST_SUITE_P(Kinds,
                         FaultyTransportTest,
                         ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace chorus::transport::testing
