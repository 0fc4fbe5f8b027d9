// The transport conformance suite (conformance_cases.cc) for the MPI transport, run as one process
// per rank under mpirun (registered for 2 and 4 ranks): the group factory makes this process's
// transport over MPI_COMM_WORLD and runs a case's body for this process's rank only; members meet
// with MPI_Barrier. Plus the MPI-only test of creation timing out. gtest prints from rank 0; other
// ranks print only their failures, and each rank exits non-zero when one of its tests failed.
// ctest kills the job after 120 s; each body's transport is also aborted after its limit (20 s for
// most cases).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "conformance.h"
#include "transport/mpi/transport.h"

namespace chorus::transport::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

int worldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int worldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The one place this program makes an MPI transport.
std::unique_ptr<Transport> makeMpiTransport(MPI_Comm comm, Deadline deadline) {
  return mpi::createMpiTransport(comm, deadline);
}

// Point-to-point tags in two halves of h = (MPI_TAG_UB - 1024) / 2, the largest 2^30 + h - 1, and
// 1024 collective tags (transport/mpi/transport.h).
Capabilities mpiCapabilities() {
  int* tagUb = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
  if (!flag || !tagUb)
    throw std::runtime_error("MPI_COMM_WORLD has no MPI_TAG_UB");
  Capabilities capabilities;
  capabilities.canCrash = false;
  const uint64_t half = (uint64_t(*tagUb) - 1024) / 2;
  capabilities.tagLimits = Capabilities::TagLimits{(uint64_t{1} << 30) + half - 1, 1024};
  return capabilities;
}

class MpiMember : public Member {
 public:
  explicit MpiMember(GuardedTransport& transport) : transport_(transport) {}

  int rank() const override { return worldRank(); }
  int size() const override { return worldSize(); }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void crash() override {
    throw UnsupportedError("an MPI rank cannot crash without ending the job");
  }
  void destroyTransport() override { transport_.reset(); }

 private:
  GuardedTransport& transport_;
};

// This process is member worldRank() of a group of worldSize().
class MpiGroupFactory : public GroupFactory {
 public:
  MpiGroupFactory() : GroupFactory("mpi", "mpi", worldSize(), mpiCapabilities()) {}

  void runGroup(const RankBody& body, seconds limit) override {
    GuardedTransport transport(makeMpiTransport(MPI_COMM_WORLD, Deadline::after(seconds(30))));
    MpiMember member(transport);
    runMemberHere(transport, member, body, limit);
    MPI_Barrier(MPI_COMM_WORLD);
    transport.reset();
  }
};

// Evaluated by InitGoogleTest, after MPI_Init_thread.
INSTANTIATE_TEST_SUITE_P(
    Mpi,
    Conformance,
    ::testing::Values(std::shared_ptr<GroupFactory>(std::make_shared<MpiGroupFactory>())),
    factoryName);

// Rank 0 makes a transport on its own: it times out; the others join later, once it has given up.
TEST(MpiTransport, CreationTimesOut) {
  MPI_Comm scratch;
  MPI_Comm_dup(MPI_COMM_WORLD, &scratch);
  if (worldRank() == 0) {
    auto start = Clock::now();
    EXPECT_THROW(makeMpiTransport(scratch, Deadline::after(milliseconds(300))), TimeoutError);
    EXPECT_LT(Clock::now() - start, seconds(3));
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 has timed out
    // Completes with rank 0's abandoned duplication (which rank 0's MPI calls progress).
    auto transport = makeMpiTransport(scratch, soon());
    EXPECT_EQ(transport->size(), worldSize());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&scratch);
}

// Prints only failures, prefixed with the rank (for ranks other than 0).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, result.file_name(), result.line_number(),
                   result.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace chorus::transport::testing

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided < MPI_THREAD_MULTIPLE && rank == 0)
    std::fprintf(stderr, "warning: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n",
                 provided);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new chorus::transport::testing::FailurePrinter(rank));
  }
  int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
