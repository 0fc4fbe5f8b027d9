// Calls whose element counts agree but whose shapes or axes differ across ranks are a
// MismatchError naming the field "shape" (Note [Shape signature], runtime/communicator_ops.h),
// not bytes moved into the wrong places. Found by an audit: an allgather of a (2, 3) array on one
// rank and a (3, 2) array on the other returned a (4, 3) and a (6, 2) result, both wrong, with no
// error. Where a rank's part may end before it hears from the other (a broadcast's root), it
// raises at its next call instead, as for any mismatch (tests/algorithms/mismatch_test.cc).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::RankOptions;
using chorus::testing::runRanks;

// Shapes of six elements each.
const std::vector<int64_t> kWide = {2, 3};
const std::vector<int64_t> kTall = {3, 2};

// One call on a rank: `mine` is the shape this rank passes (input and output are sized by it).
using Call = std::function<void(Communicator& comm, const std::vector<int64_t>& mine)>;

// Runs `call` on two ranks, rank 1 with `other` and rank 0 with `first`, then a barrier; expects
// each rank to raise a MismatchError naming `field` in the call or, failing that, in the barrier.
void expectMismatch(const std::string& backend,
                    const std::vector<int64_t>& first,
                    const std::vector<int64_t>& other,
                    const Call& call,
                    const std::string& field = "shape") {
  RankOptions options;
  options.backend = backend;
  options.timeout = std::chrono::seconds(20);
  runRanks(
      2,
      [&](Communicator& comm) {
        std::string raised;
        try {
          call(comm, comm.rank() == 0 ? first : other);
          comm.barrier()->wait();
        } catch (const MismatchError& e) {
          raised = e.field();
        }
        EXPECT_EQ(raised, field) << "rank " << comm.rank();
      },
      options);
}

std::vector<float> buffer(const std::vector<int64_t>& shape, int64_t times = 1) {
  int64_t count = times;
  for (int64_t extent : shape) count *= extent;
  return std::vector<float>(static_cast<size_t>(count), 1.0f);
}

std::vector<int64_t> scaled(std::vector<int64_t> shape, size_t axis, int64_t by) {
  shape[axis] *= by;
  return shape;
}

class ShapeMismatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ShapeMismatchTest, Allreduce) {
  expectMismatch(GetParam(), {6}, kWide, [](Communicator& comm, const auto& shape) {
    auto data = buffer(shape);
    comm.allreduce(Tensor(data.data(), shape))->wait();
  });
}

TEST_P(ShapeMismatchTest, FusedAllreduceOfTheSameTotal) {
  expectMismatch(GetParam(), {2}, {3}, [](Communicator& comm, const auto& shape) {
    const int64_t second = 5 - shape[0];  // 2 + 3 on one rank, 3 + 2 on the other
    auto a = buffer(shape);
    auto b = buffer({second});
    comm.allreduce({Tensor(a.data(), shape), Tensor(b.data(), {second})})->wait();
  });
}

TEST_P(ShapeMismatchTest, Allgather) {
  expectMismatch(GetParam(), kWide, kTall, [](Communicator& comm, const auto& shape) {
    auto in = buffer(shape);
    auto out = buffer(shape, 2);
    comm.allgather(Tensor(in.data(), shape), Tensor(out.data(), scaled(shape, 0, 2)))->wait();
  });
}

TEST_P(ShapeMismatchTest, AllgatherAlongAnotherAxis) {
  // The same (2, 2) array on both ranks, gathered along axis 0 on rank 0 and axis 1 on rank 1.
  expectMismatch(GetParam(), {0}, {1}, [](Communicator& comm, const auto& axis) {
    const std::vector<int64_t> shape = {2, 2};
    auto in = buffer(shape);
    auto out = buffer(shape, 2);
    const auto gathered = scaled(shape, static_cast<size_t>(axis[0]), 2);
    comm.allgather(Tensor(in.data(), shape), Tensor(out.data(), gathered),
                   static_cast<int>(axis[0]))
        ->wait();
  });
}

TEST_P(ShapeMismatchTest, Broadcast) {
  expectMismatch(GetParam(), kWide, kTall, [](Communicator& comm, const auto& shape) {
    auto data = buffer(shape);
    comm.broadcast(Tensor(data.data(), shape), 0)->wait();
  });
}

TEST_P(ShapeMismatchTest, Reduce) {
  expectMismatch(GetParam(), kWide, kTall, [](Communicator& comm, const auto& shape) {
    auto data = buffer(shape);
    comm.reduce(Tensor(data.data(), shape), 0)->wait();
  });
}

TEST_P(ShapeMismatchTest, ReduceScatter) {
  expectMismatch(GetParam(), {4, 3}, {2, 6}, [](Communicator& comm, const auto& shape) {
    auto in = buffer(shape);
    std::vector<float> out(6);
    comm.reduceScatter(Tensor(in.data(), shape), Tensor(out.data(), {6}))->wait();
  });
}

TEST_P(ShapeMismatchTest, Gather) {
  expectMismatch(GetParam(), kWide, kTall, [](Communicator& comm, const auto& shape) {
    auto in = buffer(shape);
    auto out = buffer(shape, 2);
    comm.gather(Tensor(in.data(), shape), Tensor(out.data(), scaled(shape, 0, 2)), 0)->wait();
  });
}

TEST_P(ShapeMismatchTest, Scatter) {
  expectMismatch(GetParam(), kWide, kTall, [](Communicator& comm, const auto& shape) {
    auto in = buffer(shape, 2);
    auto out = buffer(shape);
    comm.scatter(Tensor(in.data(), scaled(shape, 0, 2)), Tensor(out.data(), shape), 0)->wait();
  });
}

TEST_P(ShapeMismatchTest, AllToAll) {
  expectMismatch(GetParam(), {2, 4}, {4, 2}, [](Communicator& comm, const auto& shape) {
    auto in = buffer(shape);
    auto out = buffer(shape);
    comm.allToAll(Tensor(in.data(), shape), Tensor(out.data(), shape))->wait();
  });
}

// Control: axes written differently (-1 and 1) are the same axis, and shapes that agree pass.
TEST_P(ShapeMismatchTest, TheSameAxisWrittenDifferentlyAgrees) {
  RankOptions options;
  options.backend = GetParam();
  runRanks(
      2,
      [](Communicator& comm) {
        std::vector<float> in = {1, 2, 3, 4, 5, 6};
        std::vector<float> out(12);
        comm.allgather(Tensor(in.data(), kWide), Tensor(out.data(), {2, 6}),
                       comm.rank() == 0 ? -1 : 1)
            ->wait();
        // Row i of the result is row i of rank 0's array, then row i of rank 1's.
        EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         ShapeMismatchTest,
                         ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace chorus
