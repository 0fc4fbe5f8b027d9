// The transport conformance suite (conformance_cases.cc) over groups of this test program:
//  - threads: loopback (sends buffered), loopback_rendezvous (sends wait for their receive), tcp
//    over 127.0.0.1 and shm, at sizes 2, 3, 4 and 8, with an in-process store (transport_group.h);
//  - forked processes: tcp_forked and shm_forked, one process per rank over a TCP store served by
//    the test process, at sizes 2, 3 and 4; a crash there is a real exit without goodbye.
// The MPI transport runs the same suite under mpirun (mpi_conformance_test.cc).
#include "conformance.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <map>
#include <thread>

#include "harness/fork_first.h"
#include "store/tcp_store.h"
#include "transport/shm/transport.h"
#include "transport/tcp/transport.h"

namespace chorus::transport::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Where the rank threads of one group meet: a barrier at which a member whose body has ended
// counts as arrived, so a rank that failed early never leaves the others waiting.
class ThreadMeeting {
 public:
  explicit ThreadMeeting(int size) : size_(size) {}

  // Waits for every member at barrier `generation`; throws after 15 s.
  void arrive(int generation) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++arrived_[generation];
    changed_.notify_all();
    if (!changed_.wait_for(lock, seconds(15),
                           [&] { return arrived_[generation] + left_ >= size_; })) {
      throw std::runtime_error("barrier: the other ranks did not arrive within 15 s");
    }
  }
  void leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++left_;
    changed_.notify_all();
  }

 private:
  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, int> arrived_;  // by barrier generation
  int left_ = 0;
};

class ThreadMember : public Member {
 public:
  ThreadMember(int rank, Group& group, ThreadMeeting& meeting)
      : rank_(rank), group_(group), meeting_(meeting) {}
  ~ThreadMember() override { meeting_.leave(); }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_.size()); }
  void barrier() override { meeting_.arrive(generation_++); }
  void crash() override { testing::crash(*group_[rank_]); }
  void destroyTransport() override { group_[rank_].reset(); }

 private:
  int rank_;
  Group& group_;
  ThreadMeeting& meeting_;
  int generation_ = 0;
};

// Ranks as threads of this process (transport_group.h's makeGroup and runRanks).
class ThreadGroupFactory : public GroupFactory {
 public:
  ThreadGroupFactory(const std::string& kind, int size)
      : GroupFactory(kind, kind.substr(0, kind.find('_')), size, capabilitiesOf(kind)) {}

  void runGroup(const RankBody& body, seconds limit) override {
    Group group = makeGroup(kind(), size());
    ThreadMeeting meeting(size());
    auto errors = runRanks(
        group,
        [&](Transport& t) {
          const int rank = t.rank();
          SCOPED_TRACE("rank " + std::to_string(rank));
          ThreadMember member(rank, group, meeting);
          body(t, member);
        },
        limit);
    for (size_t rank = 0; rank < errors.size(); ++rank) {
      if (errors[rank])
        ADD_FAILURE() << "rank " << rank << " threw: " << describe(errors[rank]);
    }
  }

 private:
  static Capabilities capabilitiesOf(const std::string& kind) {
    Capabilities capabilities;
    if (kind == "loopback_rendezvous") {
      capabilities.smallSendsCompleteEarly = false;
      capabilities.sendsWaitForTheirReceive = true;
    }
    return capabilities;
  }
};

const std::string kForkedToken = "conformance-forked-token";

// Where forked members meet: counters in the TCP store. As for threads, a member whose body has
// ended (or that crashed) counts as arrived at every barrier.
class StoreMeeting {
 public:
  StoreMeeting(std::shared_ptr<store::Store> store, int size)
      : store_(std::move(store)), size_(size) {}

  void arrive() {
    const std::string key = "barrier/" + std::to_string(generation_++);
    store_->add(key, 1);
    waitFor([&] { return store_->add(key, 0) + store_->add("left", 0) >= size_; });
  }
  void leave() { store_->add("left", 1); }
  void waitUntilAllLeft() {
    waitFor([&] { return store_->add("left", 0) >= size_; });
  }

 private:
  template <typename Done>
  void waitFor(Done done) {
    const auto deadline = Clock::now() + seconds(15);
    while (!done()) {
      if (Clock::now() > deadline)
        throw std::runtime_error("barrier: the other ranks did not arrive within 15 s");
      std::this_thread::sleep_for(milliseconds(2));
    }
  }

  std::shared_ptr<store::Store> store_;
  const int size_;
  int generation_ = 0;
};

class ForkedMember : public Member {
 public:
  ForkedMember(int rank, int size, GuardedTransport& transport, StoreMeeting& meeting)
      : rank_(rank), size_(size), transport_(transport), meeting_(meeting) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { meeting_.arrive(); }
  // A real crash: the process ends here, its sockets and mappings closed by the kernel.
  void crash() override {
    meeting_.leave();
    std::fflush(nullptr);
    ::_exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  void destroyTransport() override { transport_.reset(); }

 private:
  int rank_;
  int size_;
  GuardedTransport& transport_;
  StoreMeeting& meeting_;
};

// One process per rank, forked before the test process serves the store (harness/fork_first.h).
class ForkedGroupFactory : public GroupFactory {
 public:
  ForkedGroupFactory(const std::string& transport, int size)
      : GroupFactory(transport + "_forked", transport, size, Capabilities{}) {}

  void runGroup(const RankBody& body, seconds limit) override {
    chorus::testing::ForkFirst forked(kForkedToken, seconds(60));
    std::vector<pid_t> children;
    for (int rank = 0; rank < size(); ++rank) {
      children.push_back(forked.fork(
          [&, rank](const net::Address& address) { return runChild(rank, address, body, limit); }));
    }
    forked.start();
    reap(children, limit + seconds(40));  // past the members' own limit and the closing meeting
  }

 private:
  // The child's part: this rank's transport, its body, the closing meeting. Returns the exit code.
  int runChild(int rank, const net::Address& address, const RankBody& body, seconds limit) {
    auto store = std::make_shared<store::TcpStore>(address, kForkedToken, soon());
    StoreMeeting meeting(store, size());
    TransportOptions options;
    options.rank = rank;
    options.size = size();
    options.store = store;
    options.token = "transport-test-token";
    options.scope = "forked";
    options.deadline = Deadline::after(seconds(15));
    GuardedTransport transport(transportName() == "shm" ? shm::createShmTransport(options)
                                                        : tcp::createTcpTransport(options));
    ForkedMember member(rank, size(), transport, meeting);
    runMemberHere(transport, member, body, limit);
    meeting.leave();
    meeting.waitUntilAllLeft();
    transport.reset();
    return ::testing::Test::HasFailure() ? 1 : 0;
  }

  // Waits for every child, promptly (a dead shm peer is seen once reaped), killing those still
  // running at `limit`; each must exit 0.
  static void reap(const std::vector<pid_t>& children, seconds limit) {
    std::vector<int> statuses(children.size(), 0);
    std::vector<bool> done(children.size(), false);
    const auto deadline = Clock::now() + limit;
    bool killed = false;
    for (size_t running = children.size(); running > 0;) {
      for (size_t rank = 0; rank < children.size(); ++rank) {
        if (!done[rank] && ::waitpid(children[rank], &statuses[rank], WNOHANG) > 0) {
          done[rank] = true;
          --running;
        }
      }
      if (running > 0 && !killed && Clock::now() > deadline) {
        ADD_FAILURE() << "ranks still running after " << limit.count() << " s; killing them";
        for (pid_t pid : children) ::kill(pid, SIGKILL);
        killed = true;
      }
      if (running > 0)
        std::this_thread::sleep_for(milliseconds(5));
    }
    for (size_t rank = 0; rank < children.size(); ++rank) {
      const int status = statuses[rank];
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << rank << " (a forked process) ended with "
          << (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                : "signal " + std::to_string(WTERMSIG(status)));
    }
  }
};

std::vector<std::shared_ptr<GroupFactory>> allFactories() {
  std::vector<std::shared_ptr<GroupFactory>> factories;
  for (const char* kind : {"loopback", "loopback_rendezvous", "tcp", "shm"}) {
    for (int size : {2, 3, 4, 8})
      factories.push_back(std::make_shared<ThreadGroupFactory>(kind, size));
  }
  for (const char* transport : {"tcp", "shm"}) {
    for (int size : {2, 3, 4})
      factories.push_back(std::make_shared<ForkedGroupFactory>(transport, size));
  }
  return factories;
}

INSTANTIATE_TEST_SUITE_P(AllTransports,
                         Conformance,
                         ::testing::ValuesIn(allFactories()),
                         factoryName);

}  // namespace
}  // namespace chorus::transport::testing
