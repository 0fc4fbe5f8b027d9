// The transport conformance suite's group interface: every case (conformance_cases.cc) is one
// body written once for "a rank": `run([&](Transport& t, Member& m) {...})` runs it once per
// member of a fresh group, each with its own transport, and each rank checks its own results with
// gtest. A GroupFactory knows how to make the group and where its members live:
//  - threads of this process (conformance_test.cc: loopback, loopback_rendezvous, tcp, shm);
//  - forked processes, one per rank, over a TCP store (conformance_test.cc: tcp, shm);
//  - processes started by mpirun, where this process is one member and runs the body for its own
//    rank only (mpi_conformance_test.cc: mpi).
// A case that needs what a factory's transports cannot do (Capabilities) skips with GTEST_SKIP()
// and says why. Every body's waits have deadlines and every factory aborts (or kills) members
// still running after a limit, so a broken transport fails a case instead of hanging it.
//
// A new transport joins by a row in conformance_test.cc's allFactories() (with its kind in
// transport_group.cc's makeGroup, or its own GroupFactory when its ranks must be processes set up
// some other way, as mpi_conformance_test.cc's) and whatever Capabilities it lacks.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>

#include "transport/transport.h"
#include "transport_group.h"

namespace chorus::transport::testing {

// What a factory's transports can do, beyond what the contract (transport/transport.h) promises.
struct Capabilities {
  // A send of at most kSmallMessage bytes completes before its receive is posted (buffered at the
  // receiver: tcp, shm's ring, MPI's eager protocol, loopback kWhenBuffered).
  bool smallSendsCompleteEarly = true;
  // Every send waits until a receive matches it (loopback kWhenMatched).
  bool sendsWaitForTheirReceive = false;
  // A member can vanish without goodbye while the others live on (Member::crash). Not under
  // mpirun, which kills the whole job when a rank exits without MPI_Finalize.
  bool canCrash = true;
  // Tags the transport refuses although the contract allows them (MPI: MPI_TAG_UB), or none.
  struct TagLimits {
    uint64_t largestPointToPoint;  // the next point-to-point tag is InvalidArgumentError
    uint64_t collectiveTags;       // kCollectiveTag + k is InvalidArgumentError from k = this
  };
  std::optional<TagLimits> tagLimits;
};

inline constexpr size_t kSmallMessage = 2048;

// What a body may ask of its group besides its transport.
class Member {
 public:
  virtual ~Member() = default;
  // The rank this member plays (its transport's rank) and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Meets every other member, outside the transport. Threads and forked processes: members whose
  // body has ended count as met, and a barrier gives up (throws) after a limit. Under mpirun it is
  // MPI_Barrier: every member must call it as often.
  virtual void barrier() = 0;
  // Leaves without goodbye, as a killed process would (Capabilities::canCrash). The body returns
  // at once and must not use its transport again; a forked process exits here.
  virtual void crash() = 0;
  // Destroys this member's transport now (its destructor says goodbye); not to be used again.
  virtual void destroyTransport() = 0;
};

using RankBody = std::function<void(Transport& transport, Member& member)>;

class GroupFactory {
 public:
  GroupFactory(std::string kind, std::string transportName, int size, Capabilities capabilities)
      : kind_(std::move(kind)),
        transportName_(std::move(transportName)),
        size_(size),
        capabilities_(std::move(capabilities)) {}
  virtual ~GroupFactory() = default;

  // "tcp", "tcp_forked", "mpi", ...: with the size, the name of the test parameter.
  const std::string& kind() const { return kind_; }
  // What Transport::name() says.
  const std::string& transportName() const { return transportName_; }
  int size() const { return size_; }
  const Capabilities& capabilities() const { return capabilities_; }

  // Makes a fresh group and runs `body` once per member (this process's only, under mpirun), each
  // with its own transport, under SCOPED_TRACE naming the rank. A body that throws is a test
  // failure naming its rank. After every body has ended the members meet, then their transports
  // are destroyed (so a goodbye never overtakes a case's last message). Members still running
  // after `limit` have their transports aborted (or are killed): a test failure, never a hang.
  void run(const RankBody& body, std::chrono::seconds limit = kDefaultLimit) {
    runGroup(body, limit);
  }

  static constexpr std::chrono::seconds kDefaultLimit{20};

 protected:
  virtual void runGroup(const RankBody& body, std::chrono::seconds limit) = 0;

 private:
  std::string kind_;
  std::string transportName_;
  int size_;
  Capabilities capabilities_;
};

void PrintTo(const std::shared_ptr<GroupFactory>& factory, std::ostream* out);
std::string factoryName(const ::testing::TestParamInfo<std::shared_ptr<GroupFactory>>& info);

// The suite: instantiate it with INSTANTIATE_TEST_SUITE_P(Prefix, Conformance, factories,
// factoryName) in the test program that owns the factories.
class Conformance : public ::testing::TestWithParam<std::shared_ptr<GroupFactory>> {
 protected:
  GroupFactory& group() const { return *GetParam(); }
  const Capabilities& can() const { return GetParam()->capabilities(); }
  int size() const { return GetParam()->size(); }
  void run(const RankBody& body, std::chrono::seconds limit = GroupFactory::kDefaultLimit) const {
    GetParam()->run(body, limit);
  }
};

// The members of process groups (forked, mpirun): the transport, guarded so that a watchdog
// thread may abort it while the body runs or destroys it.
class GuardedTransport {
 public:
  explicit GuardedTransport(std::unique_ptr<Transport> transport)
      : transport_(std::move(transport)) {}
  Transport& get() { return *transport_; }
  void abort(std::exception_ptr reason);
  void reset();

 private:
  std::mutex mutex_;
  std::unique_ptr<Transport> transport_;
};

// Runs `body` for `member` over `transport` in this process (a process group's member): traced
// with the rank, a throw reported as a failure, the transport aborted after `limit` (a failure).
// The caller then meets the other members and destroys the transport.
void runMemberHere(GuardedTransport& transport,
                   Member& member,
                   const RankBody& body,
                   std::chrono::seconds limit);

// Helpers for bodies.
Deadline soon();
void waitOne(Transport& transport, Request& request, Deadline deadline = soon());
void send(Transport& t, int peer, uint64_t tag, const void* data, size_t bytes, Fingerprint fp);
void recv(Transport& t, int peer, uint64_t tag, void* data, size_t bytes, Fingerprint fp);
// What `fn` threw; null when it returned.
std::exception_ptr attempt(const std::function<void()>& fn);
std::string describe(const std::exception_ptr& error);
void expectOk(const std::exception_ptr& error);

// Checks that `error` is an E; returns it (alive as long as `error`), or null after a failure.
template <typename E>
const E* expectError(const std::exception_ptr& error) {
  if (!error) {
    ADD_FAILURE() << "did not fail";
    return nullptr;
  }
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return &e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "failed with the wrong type: " << e.what();
  }
  return nullptr;
}

// Checks that `error` is an E whose message contains `text`.
template <typename E>
void expectErrorMentions(const std::exception_ptr& error, const std::string& text) {
  if (const E* e = expectError<E>(error)) {
    EXPECT_NE(std::string(e->what()).find(text), std::string::npos)
        << "'" << e->what() << "' does not mention '" << text << "'";
  }
}

}  // namespace chorus::transport::testing
