// The transport conformance suite's cases for receives from any peer (kAnyPeer, transport.h),
// written once for every transport like conformance_cases.cc. Expected values are closed forms of
// the sender's rank and the message's index, so a receive that names the wrong sender, loses or
// duplicates a message, or breaks one sender's order fails.
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "conformance.h"

namespace chorus::transport::testing {
namespace {

using std::chrono::milliseconds;

constexpr int kPerSender = 20;
constexpr uint64_t kTag = 5;

int64_t valueOf(int sender, int index) { return 1000 * sender + index; }

// Checks what rank 0 received from any peer: `values[k]` arrived in a receive whose Request named
// `senders[k]`. Every sender's kPerSender messages arrive once each, in the order sent.
void checkFromEveryone(int size,
                       const std::vector<int>& senders,
                       const std::vector<int64_t>& values) {
  ASSERT_EQ(senders.size(), values.size());
  std::map<int, int> next;  // sender -> index of its next message
  for (size_t k = 0; k < values.size(); ++k) {
    const int sender = senders[k];
    ASSERT_TRUE(sender > 0 && sender < size) << "receive " << k << " named rank " << sender;
    EXPECT_EQ(values[k], valueOf(sender, next[sender]))
        << "receive " << k << " from rank " << sender << " out of order or from another rank";
    ++next[sender];
  }
  for (int sender = 1; sender < size; ++sender) EXPECT_EQ(next[sender], kPerSender) << sender;
}

// Phase 1: the messages are sent (and mostly buffered) before rank 0 posts its receives. Phase 2:
// rank 0 posts every receive first, and the messages arrive after. Messages are large enough to
// stream in after their header.
TEST_P(Conformance, AnyPeerReceivesTakeEveryPeersMessagesInOrder) {
  run([&](Transport& t, Member& m) {
    const int senders = size() - 1;
    const int total = senders * kPerSender;
    constexpr size_t kLength = 12000;  // int64s: 96 KB
    for (int phase = 1; phase <= 2; ++phase) {
      SCOPED_TRACE(phase == 1 ? "phase 1: sent first" : "phase 2: received first");
      if (t.rank() != 0) {
        std::vector<std::vector<int64_t>> out(kPerSender);
        std::vector<Request> requests(kPerSender);
        std::vector<Request*> all;
        if (phase == 2)
          m.barrier();
        for (int i = 0; i < kPerSender; ++i) {
          out[i].assign(kLength, valueOf(t.rank(), i));
          t.postSend(0, kTag, stamp(), out[i].data(), out[i].size() * 8, requests[i]);
          all.push_back(&requests[i]);
        }
        if (phase == 1)
          m.barrier();
        t.wait(all, soon());
        continue;
      }
      std::vector<std::vector<int64_t>> in(total);
      std::vector<Request> requests(total);
      std::vector<int> senderOf(total);
      std::vector<int64_t> values(total);
      if (phase == 1) {
        m.barrier();
        for (int k = 0; k < total; ++k) {
          in[k].assign(kLength, -1);
          t.postRecv(kAnyPeer, kTag, stamp(), in[k].data(), in[k].size() * 8, requests[k]);
          waitOne(t, requests[k]);
          senderOf[k] = requests[k].peer;
          values[k] = in[k].front();
          EXPECT_EQ(in[k].back(), in[k].front()) << "receive " << k;
        }
      } else {
        std::vector<Request*> all;
        for (int k = 0; k < total; ++k) {
          in[k].assign(kLength, -1);
          t.postRecv(kAnyPeer, kTag, stamp(), in[k].data(), in[k].size() * 8, requests[k]);
          all.push_back(&requests[k]);
        }
        m.barrier();
        t.wait(all, soon());
        for (int k = 0; k < total; ++k) {
          senderOf[k] = requests[k].peer;
          values[k] = in[k].front();
          EXPECT_EQ(in[k].back(), in[k].front()) << "receive " << k;
        }
      }
      checkFromEveryone(size(), senderOf, values);
    }
  });
}

// As in MPI, a message goes to the earliest posted receive that can take it, whether it names the
// sender or takes any peer's: rank 1 sends 11 then 22 to rank 0, which posts two receives on that
// tag in either order, before the messages arrive or after (both buffered: rank 0 has first waited
// for a message rank 1 sent after them).
TEST_P(Conformance, TheEarliestPostedReceiveTakesAMessage) {
  if (!can().smallSendsCompleteEarly)
    GTEST_SKIP() << "needs small sends that complete before their receive";
  struct Case {
    bool anyFirst;
    bool arrivedFirst;
  };
  for (Case c : {Case{true, false}, Case{false, false}, Case{true, true}, Case{false, true}}) {
    SCOPED_TRACE(std::string(c.anyFirst ? "any peer first" : "named peer first") +
                 (c.arrivedFirst ? ", messages buffered first" : ", messages after"));
    run([&](Transport& t, Member& m) {
      if (t.rank() != 0 && t.rank() != 1) {
        m.barrier();
        return;
      }
      if (t.rank() == 1) {
        if (!c.arrivedFirst)
          m.barrier();
        for (int64_t value : {11, 22}) send(t, 0, kTag, &value, 8, stamp());
        const int64_t last = 33;
        send(t, 0, kTag + 1, &last, 8, stamp());
        if (c.arrivedFirst)
          m.barrier();
        return;
      }
      if (c.arrivedFirst) {  // 33 came after 11 and 22, which now wait buffered
        int64_t last = 0;
        recv(t, 1, kTag + 1, &last, 8, stamp());
        EXPECT_EQ(last, 33);
      }
      int64_t fromAny = 0, fromOne = 0;
      Request any, one;
      if (c.anyFirst) {
        t.postRecv(kAnyPeer, kTag, stamp(), &fromAny, 8, any);
        t.postRecv(1, kTag, stamp(), &fromOne, 8, one);
      } else {
        t.postRecv(1, kTag, stamp(), &fromOne, 8, one);
        t.postRecv(kAnyPeer, kTag, stamp(), &fromAny, 8, any);
      }
      if (!c.arrivedFirst)
        m.barrier();
      Request* both[] = {&any, &one};
      t.wait(both, soon());
      if (!c.arrivedFirst) {
        int64_t last = 0;
        recv(t, 1, kTag + 1, &last, 8, stamp());
      } else {
        m.barrier();
      }
      EXPECT_EQ(fromAny, c.anyFirst ? 11 : 22);
      EXPECT_EQ(fromOne, c.anyFirst ? 22 : 11);
      EXPECT_EQ(any.peer, 1);
    });
  }
}

// A peer that crashes while a receive from any peer waits fails it, naming that peer.
TEST_P(Conformance, AnyPeerReceiveFailsWhenAPeerCrashes) {
  if (!can().canCrash)
    GTEST_SKIP() << "a member cannot vanish without ending the job (mpirun kills it)";
  run([&](Transport& t, Member& m) {
    const int dead = size() - 1;
    if (t.rank() == dead) {
      m.barrier();
      std::this_thread::sleep_for(milliseconds(50));  // let rank 0 start waiting
      m.crash();
      return;
    }
    m.barrier();
    if (t.rank() != 0)
      return;
    auto error = attempt([&] {
      int64_t value = 0;
      Request request;
      t.postRecv(kAnyPeer, kTag, stamp(), &value, 8, request);
      waitOne(t, request, Deadline::after(std::chrono::seconds(10)));
    });
    if (const auto* e = expectError<PeerError>(error)) {
      EXPECT_EQ(e->peerRank(), dead) << e->what();
    }
  });
}

// A receive from any peer that nothing matches times out naming every other rank; a send to
// kAnyPeer is refused and changes nothing.
TEST_P(Conformance, AnyPeerReceiveTimesOutNamingEveryPeer) {
  run([&](Transport& t, Member&) {
    if (t.rank() != 0)
      return;
    int64_t value = 0;
    Request request;
    auto refused = attempt([&] { t.postSend(kAnyPeer, kTag, stamp(), &value, 8, request); });
    expectErrorMentions<InvalidArgumentError>(refused, "is not another rank");
    EXPECT_EQ(t.failure(), nullptr);
    auto error = attempt([&] {
      t.postRecv(kAnyPeer, kTag, stamp(), &value, 8, request);
      waitOne(t, request, Deadline::after(milliseconds(300)));
    });
    if (const auto* e = expectError<TimeoutError>(error)) {
      std::vector<int> everyone;
      for (int peer = 1; peer < size(); ++peer) everyone.push_back(peer);
      EXPECT_EQ(e->missingRanks(), everyone);
    }
  });
}

// A receive from any peer lives on while one peer still can send, and fails with PeerError once
// every peer has closed.
TEST_P(Conformance, AnyPeerReceiveFailsOnceEveryPeerHasLeft) {
  if (!can().smallSendsCompleteEarly)
    GTEST_SKIP() << "needs small sends that complete before their receive";
  run([&](Transport& t, Member& m) {
    const int last = size() - 1;
    if (t.rank() != 0) {
      if (t.rank() == last) {
        t.close();
        m.barrier();
        m.barrier();
        return;
      }
      m.barrier();
      const int64_t value = valueOf(t.rank(), 0);
      send(t, 0, kTag, &value, 8, stamp());
      t.close();
      m.barrier();
      return;
    }
    m.barrier();  // the last rank has closed; the others send once, then close
    for (int k = 1; k < last; ++k) {
      int64_t value = 0;
      Request request;
      t.postRecv(kAnyPeer, kTag, stamp(), &value, 8, request);
      waitOne(t, request);
      EXPECT_EQ(value, valueOf(request.peer, 0));
    }
    m.barrier();  // every peer has closed
    int64_t value = 0;
    auto error = attempt([&] {
      Request request;
      t.postRecv(kAnyPeer, kTag, stamp(), &value, 8, request);
      waitOne(t, request);
    });
    expectErrorMentions<PeerError>(error, "every other rank has closed its communicator");
  });
}

}  // namespace
}  // namespace chorus::transport::testing
