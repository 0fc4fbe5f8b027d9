// Note [Collectives and transfers together] (src/runtime/communicator_transfers.cc): a collective
// issued while sends and receives issued before it are in flight runs at once, and they keep
// moving while it waits; a send or receive issued while a collective runs starts at once, and moves
// while the collective waits; as MPI allows. Each program below is one that MPI runs and that,
// with the collective held until every earlier transfer is done, or the transfer until the
// collective is, waits until its deadline on every rank. Ranks are threads (runRanks) on shm, tcp,
// and the hierarchical backend on two simulated nodes, whose node and leaders steps poll the
// transfers of its flat step. Messages are small (they fit a ring) and large (3 MiB: the sender
// waits for its receiver). Expected values are closed forms.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

struct Case {
  std::string backend;
  int size;
  std::vector<std::string> nodeIds;  // simulated nodes (hierarchical); empty: one node
};

class CollectiveAmidTransfersTest : public ::testing::TestWithParam<Case> {
 protected:
  void runRanks(const chorus::testing::RankFunction& fn) {
    chorus::testing::RankOptions options;
    options.backend = GetParam().backend;
    options.nodeIds = GetParam().nodeIds;
    options.timeout = std::chrono::seconds(20);  // a hang fails the test long before ctest's
    chorus::testing::runRanks(GetParam().size, fn, options);
  }
};

constexpr int64_t kSmall = 5;
constexpr int64_t kLarge = int64_t{3} << 18;  // int32s: 3 MiB

// What rank `from` sends with `tag`: element i.
int32_t sent(int from, int tag, int64_t i) {
  return from * 1000 + tag * 100 + static_cast<int32_t>(i % 97);
}

std::vector<int32_t> message(int from, int tag, int64_t count) {
  std::vector<int32_t> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = sent(from, tag, i);
  return values;
}

void expectMessage(const std::vector<int32_t>& got, int from, int tag) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], sent(from, tag, static_cast<int64_t>(i)))
        << "from rank " << from << ", tag " << tag << ", element " << i << " of " << got.size();
  }
}

// Pairs for the tests that need them: even rank r with odd rank r + 1; the last rank of an odd
// size has none (-1) and only joins the collectives.
int partnerOf(int rank, int size) {
  const int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
  return partner < size ? partner : -1;
}

// Every rank receives from its left with a receive posted before a barrier, and sends to its
// right only after the barrier (irecv; barrier; send): the barrier cannot wait for the receive.
TEST_P(CollectiveAmidTransfersTest, AReceivePostedBeforeABarrierGetsTheSendIssuedAfterIt) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), right = (r + 1) % p, left = (r + p - 1) % p;
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> got(count, -1);
      auto receive = comm.recv(Tensor(got.data(), {count}), left, 1);
      comm.barrier()->wait();
      std::vector<int32_t> out = message(r, 1, count);
      comm.send(Tensor(out.data(), {count}), right, 1)->wait();
      receive->wait();
      expectMessage(got, left, 1);
    }
  });
}

// Even ranks send to the odd rank after them asynchronously, then allreduce; that rank allreduces
// first and receives after. The large send cannot finish before its receiver reads, and the
// receiver, waiting in the allreduce on shm, reads only what the allreduce's waits move.
TEST_P(CollectiveAmidTransfersTest, AnAsyncSendBeforeACollectiveThatItsReceiverEntersFirst) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> out = message(r, 2, count), got(count, -1);
      std::shared_ptr<Work> send;
      if (partner >= 0 && r % 2 == 0)
        send = comm.send(Tensor(out.data(), {count}), partner, 2);
      std::vector<int64_t> sum = {r};
      comm.allreduce(Tensor(sum.data(), {1}))->wait();
      EXPECT_EQ(sum[0], int64_t{p} * (p - 1) / 2);
      if (partner >= 0 && r % 2 == 1) {
        comm.recv(Tensor(got.data(), {count}), partner, 2)->wait();
        expectMessage(got, partner, 2);
      }
      if (send)
        send->wait();
    }
  });
}

// The receiver posts a receive, issues an allreduce, and tells the sender (on a second
// communicator) that it has; only then does the sender send, blocking, and join the allreduce. The
// receiver's allreduce must move the transfer while it waits (the shm backend's group waits poll
// its transport), or neither goes on.
TEST_P(CollectiveAmidTransfersTest, ABlockingSendToAReceiverWaitingInACollective) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    auto side = comm.split(0, r);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> got(count, -1), out = message(r, 3, count);
      std::vector<float> ones(7, 1.0f);
      int32_t ready = 1;
      if (partner >= 0 && r % 2 == 0) {
        auto receive = comm.recv(Tensor(got.data(), {count}), partner, 3);
        auto allreduce = comm.allreduce(Tensor(ones.data(), {7}));
        side->send(Tensor(&ready, {1}), partner, 3)->wait();
        allreduce->wait();
        receive->wait();
        expectMessage(got, partner, 3);
      } else if (partner >= 0) {
        side->recv(Tensor(&ready, {1}), partner, 3)->wait();
        comm.send(Tensor(out.data(), {count}), partner, 3)->wait();
        comm.allreduce(Tensor(ones.data(), {7}))->wait();
      } else {
        comm.allreduce(Tensor(ones.data(), {7}))->wait();
      }
      EXPECT_EQ(ones[6], static_cast<float>(p));
    }
  });
}

// A receive whose bytes land while a collective runs amid it completes then, not when the
// collective ends: the receiver waits for it during the collective, and only then tells the
// sender (on a second communicator) to join the collective.
TEST_P(CollectiveAmidTransfersTest, AReceiveThatLandsDuringACollectiveCompletesDuringIt) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    auto side = comm.split(0, r);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> got(count, -1), out = message(r, 6, count);
      std::vector<int64_t> sum = {r};
      int32_t ready = 1, received = 1;
      if (partner >= 0 && r % 2 == 0) {
        auto receive = comm.recv(Tensor(got.data(), {count}), partner, 6);
        auto allreduce = comm.allreduce(Tensor(sum.data(), {1}));
        side->send(Tensor(&ready, {1}), partner, 6)->wait();
        receive->wait();  // while the allreduce waits for the sender
        expectMessage(got, partner, 6);
        side->send(Tensor(&received, {1}), partner, 7)->wait();
        allreduce->wait();
      } else if (partner >= 0) {
        side->recv(Tensor(&ready, {1}), partner, 6)->wait();
        comm.send(Tensor(out.data(), {count}), partner, 6)->wait();
        side->recv(Tensor(&received, {1}), partner, 7)->wait();
        comm.allreduce(Tensor(sum.data(), {1}))->wait();
      } else {
        comm.allreduce(Tensor(sum.data(), {1}))->wait();
      }
      EXPECT_EQ(sum[0], int64_t{p} * (p - 1) / 2);
    }
  });
}

// Even ranks send to the odd rank after them on one tag before and after an async allreduce, with
// a barrier behind the second send; that rank runs both collectives first, then takes both
// messages, in call order. The send behind the allreduce waits for it; the collectives see the
// right values.
TEST_P(CollectiveAmidTransfersTest, TransfersAroundAsyncCollectivesKeepTheirOrder) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    const bool sends = partner >= 0 && r % 2 == 0;
    std::vector<int32_t> first = message(r, 4, kLarge), second = message(r, 5, kLarge);
    std::vector<int64_t> sum = {r + 1};
    std::vector<std::shared_ptr<Work>> works;
    if (sends)
      works.push_back(comm.send(Tensor(first.data(), {kLarge}), partner, 4));
    works.push_back(comm.allreduce(Tensor(sum.data(), {1})));
    if (sends)
      works.push_back(comm.send(Tensor(second.data(), {kLarge}), partner, 4));
    works.push_back(comm.barrier());
    if (partner >= 0 && r % 2 == 1) {
      works.back()->wait();  // the barrier
      EXPECT_EQ(sum[0], int64_t{p} * (p + 1) / 2);
      std::vector<int32_t> gotFirst(kLarge, -1), gotSecond(kLarge, -1);
      comm.recv(Tensor(gotFirst.data(), {kLarge}), partner, 4)->wait();
      comm.recv(Tensor(gotSecond.data(), {kLarge}), partner, 4)->wait();
      expectMessage(gotFirst, partner, 4);
      expectMessage(gotSecond, partner, 5);
    }
    for (auto& work : works) work->wait();
    EXPECT_EQ(sum[0], int64_t{p} * (p + 1) / 2);
  });
}

// Even ranks issue an async allreduce, then send to the odd rank after them and wait for the send;
// that rank receives first and joins the allreduce after. The send must start while the allreduce
// waits for its receiver (the worker runs the allreduce; its waits post the send).
TEST_P(CollectiveAmidTransfersTest, ASendIssuedAfterAnAsyncCollectiveStartsWhileItRuns) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> out = message(r, 10, count), got(count, -1);
      std::vector<int64_t> sum = {r};
      if (partner >= 0 && r % 2 == 0) {
        auto allreduce = comm.allreduce(Tensor(sum.data(), {1}));
        comm.send(Tensor(out.data(), {count}), partner, 10)->wait();  // while the allreduce waits
        allreduce->wait();
      } else if (partner >= 0) {
        comm.recv(Tensor(got.data(), {count}), partner, 10)->wait();
        expectMessage(got, partner, 10);
        comm.allreduce(Tensor(sum.data(), {1}))->wait();
      } else {
        comm.allreduce(Tensor(sum.data(), {1}))->wait();
      }
      EXPECT_EQ(sum[0], int64_t{p} * (p - 1) / 2);
    }
  });
}

// The mirror image for a receive: even ranks issue an async barrier, then a blocking receive from
// the odd rank after them, which sends (blocking) before it joins the barrier. On shm a large send
// waits for its receiver, so the receive must be posted while the barrier waits (tcp's waits read
// a message that no receive awaits into a buffer of its own, so its send finishes anyway).
TEST_P(CollectiveAmidTransfersTest, AReceiveIssuedAfterAnAsyncCollectiveTakesASendThatWaitsForIt) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> out = message(r, 11, count), got(count, -1);
      if (partner >= 0 && r % 2 == 0) {
        auto barrier = comm.barrier();
        comm.recv(Tensor(got.data(), {count}), partner, 11)->wait();  // while the barrier waits
        expectMessage(got, partner, 11);
        barrier->wait();
      } else if (partner >= 0) {
        comm.send(Tensor(out.data(), {count}), partner, 11)->wait();
        comm.barrier()->wait();
      } else {
        comm.barrier()->wait();
      }
    }
  });
}

// A collective that runs on the caller's thread (a blocking call, BlockingCalls, which finds the
// queue idle) posts a send that another thread issues meanwhile, and hands it to the worker when it
// ends; the receiver takes the message before it joins the allreduce. The sending thread starts a
// little after the allreduce, most often while it waits; issued first, the send runs in a batch
// that takes the allreduce amid it, and the program must finish too.
TEST_P(CollectiveAmidTransfersTest, ASendFromAnotherThreadStartsWhileABlockingCollectiveWaits) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> out = message(r, 12, count), got(count, -1);
      std::vector<int64_t> sum = {r};
      if (partner >= 0 && r % 2 == 0) {
        std::exception_ptr sendError;
        std::jthread sender([&] {
          try {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));  // order only, not timing
            comm.send(Tensor(out.data(), {count}), partner, 12)->wait();
          } catch (...) {
            sendError = std::current_exception();
          }
        });
        {
          BlockingCalls blocking;
          comm.allreduce(Tensor(sum.data(), {1}))->wait();
        }
        sender.join();
        if (sendError)
          std::rethrow_exception(sendError);
      } else if (partner >= 0) {
        comm.recv(Tensor(got.data(), {count}), partner, 12)->wait();
        expectMessage(got, partner, 12);
        comm.allreduce(Tensor(sum.data(), {1}))->wait();
      } else {
        comm.allreduce(Tensor(sum.data(), {1}))->wait();
      }
      EXPECT_EQ(sum[0], int64_t{p} * (p - 1) / 2);
    }
  });
}

// Even ranks issue two async allreduces, then a send to the odd rank after them; that rank
// receives first and joins both allreduces after. The send cannot wait for the second allreduce
// (queued behind the first, which waits for the receiver): it starts while the first runs, ahead
// of the second, as in MPI (a data-parallel step's bucket allreduces, then a pipeline's send).
TEST_P(CollectiveAmidTransfersTest, ASendIssuedBehindTwoAsyncCollectivesStartsWhileTheFirstRuns) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    for (int64_t count : {kSmall, kLarge}) {
      std::vector<int32_t> out = message(r, 13, count), got(count, -1);
      std::vector<int64_t> first = {r}, second = {2 * r};
      if (partner >= 0 && r % 2 == 0) {
        auto one = comm.allreduce(Tensor(first.data(), {1}));
        auto two = comm.allreduce(Tensor(second.data(), {1}));
        comm.send(Tensor(out.data(), {count}), partner, 13)->wait();
        one->wait();
        two->wait();
      } else if (partner >= 0) {
        comm.recv(Tensor(got.data(), {count}), partner, 13)->wait();
        expectMessage(got, partner, 13);
        comm.allreduce(Tensor(first.data(), {1}))->wait();
        comm.allreduce(Tensor(second.data(), {1}))->wait();
      } else {
        comm.allreduce(Tensor(first.data(), {1}))->wait();
        comm.allreduce(Tensor(second.data(), {1}))->wait();
      }
      EXPECT_EQ(first[0], int64_t{p} * (p - 1) / 2);
      EXPECT_EQ(second[0], int64_t{p} * (p - 1));
    }
  });
}

// As ASendIssuedAfterAnAsyncCollectiveStartsWhileItRuns, but the send comes once the allreduce
// has most likely gone to sleep (100 ms later: order only, not timing), which the send wakes
// (Backend::wakeCollective). Without the wake it still finishes, later: tcp's sleeping wait looks
// again within a second (measured: 1.0 s for the tcp cases instead of 0.1 s), shm's within 50 ms.
TEST_P(CollectiveAmidTransfersTest, ASendIssuedWhileACollectiveSleepsWakesIt) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank(), p = comm.size(), partner = partnerOf(r, p);
    std::vector<int32_t> out = message(r, 15, kSmall), got(kSmall, -1);
    std::vector<int64_t> sum = {r};
    if (partner >= 0 && r % 2 == 0) {
      auto allreduce = comm.allreduce(Tensor(sum.data(), {1}));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm.send(Tensor(out.data(), {kSmall}), partner, 15)->wait();
      allreduce->wait();
    } else if (partner >= 0) {
      comm.recv(Tensor(got.data(), {kSmall}), partner, 15)->wait();
      expectMessage(got, partner, 15);
      comm.allreduce(Tensor(sum.data(), {1}))->wait();
    } else {
      comm.allreduce(Tensor(sum.data(), {1}))->wait();
    }
    EXPECT_EQ(sum[0], int64_t{p} * (p - 1) / 2);
  });
}

// Rank 0 issues an async allreduce that rank 1 joins only later, and a receive from rank 1 behind
// it (most often posted by the allreduce's waits: the abort comes a little later), then aborts
// the communicator: the allreduce and the receive fail on rank 0, and the others' allreduce fails
// with rank 0's abort; nothing waits for a deadline.
TEST_P(CollectiveAmidTransfersTest, AnAbortFailsTheCollectiveAndTheTransfersItStarted) {
  runRanks([&](Communicator& comm) {
    const int r = comm.rank();
    auto side = comm.split(0, r);
    std::vector<int64_t> sum = {r};
    std::vector<int32_t> got(kLarge, -1);
    int32_t aborted = 1;
    if (r == 0) {
      auto allreduce = comm.allreduce(Tensor(sum.data(), {1}));
      auto receive = comm.recv(Tensor(got.data(), {kLarge}), 1, 14);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // order only, not timing
      comm.abort("the test aborts it");
      side->send(Tensor(&aborted, {1}), 1, 14)->wait();
      EXPECT_THROW(allreduce->wait(), Error);
      EXPECT_THROW(receive->wait(), Error);
    } else {
      if (r == 1)
        side->recv(Tensor(&aborted, {1}), 0, 14)->wait();
      EXPECT_THROW(comm.allreduce(Tensor(sum.data(), {1}))->wait(), Error);
    }
  });
}

// The hierarchical backend's leaders step (three ranks on nodes {a, a, b}: ranks 0 and 2 lead):
// rank 2, alone on its node, posts a receive of 16 MiB from rank 0 (more than the sockets
// hold), issues a barrier and tells rank 0 so (on a second communicator); rank 0 sends, blocking,
// and joins the barrier only once rank 2 says it has the message. Rank 2's barrier waits in the
// leaders' step, on other connections than the transfer's: its waits must move the transfer and
// complete its Work.
TEST(CollectiveAmidTransfersHierarchicalTest, TheLeadersStepMovesTheFlatStepsTransfers) {
  chorus::testing::RankOptions options;
  options.backend = "hierarchical";
  options.nodeIds = {"a", "a", "b"};
  options.timeout = std::chrono::seconds(20);
  constexpr int64_t kHuge = int64_t{4} << 20;  // int32s: 16 MiB
  chorus::testing::runRanks(
      3,
      [&](Communicator& comm) {
        const int r = comm.rank();
        auto side = comm.split(0, r);
        int32_t signal = 1;
        if (r == 2) {
          std::vector<int32_t> got(kHuge, -1);
          auto receive = comm.recv(Tensor(got.data(), {kHuge}), 0, 8);
          auto barrier = comm.barrier();
          side->send(Tensor(&signal, {1}), 0, 8)->wait();
          receive->wait();  // while the barrier waits for rank 0
          side->send(Tensor(&signal, {1}), 0, 9)->wait();
          barrier->wait();
          expectMessage(got, 0, 8);
        } else if (r == 0) {
          std::vector<int32_t> out = message(0, 8, kHuge);
          side->recv(Tensor(&signal, {1}), 2, 8)->wait();
          comm.send(Tensor(out.data(), {kHuge}), 2, 8)->wait();
          side->recv(Tensor(&signal, {1}), 2, 9)->wait();
          comm.barrier()->wait();
        } else {
          comm.barrier()->wait();
        }
      },
      options);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* backend : {"shm", "tcp"}) {
    for (int size : {2, 3, 4}) all.push_back({backend, size, {}});
  }
  // Two simulated nodes: a node step over shm, a leaders' step over tcp (at 3 ranks, node "b" has
  // one), the transfers over the flat tcp step.
  all.push_back({"hierarchical", 3, {"a", "a", "b"}});
  all.push_back({"hierarchical", 4, {"a", "a", "b", "b"}});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         CollectiveAmidTransfersTest,
                         ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.backend + "_size" + std::to_string(info.param.size);
                         });

}  // namespace
}  // namespace chorus
