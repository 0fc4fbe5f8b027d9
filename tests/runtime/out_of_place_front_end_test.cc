// The Communicator's out-of-place forms (allreduce, broadcast and reduce with an input and an
// output), through the public API with ranks as threads (runRanks) on the shm and tcp backends:
// the output gets the result, the input is never written, a root-only output is never written
// elsewhere, and a bad output is an InvalidArgumentError that names what is wrong. Expected values
// are closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/run_ranks.h"

namespace chorus {
namespace {

struct Case {
  std::string backend;
  int size;
};

class OutOfPlaceFrontEnd : public ::testing::TestWithParam<Case> {
 protected:
  void runRanks(const chorus::testing::RankFunction& fn) {
    chorus::testing::RankOptions options;
    options.backend = GetParam().backend;
    chorus::testing::runRanks(GetParam().size, fn, options);
  }
};

// Rank r's value at index i, and its sum over ranks 0..p-1: small integers, exact in every dtype.
double valueAt(int rank, size_t i) { return (rank + 1) + static_cast<double>(i % 5); }
double sumAt(int p, size_t i) { return p * (p + 1) / 2.0 + p * static_cast<double>(i % 5); }

template <typename T>
std::vector<T> rankValues(int rank, size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(valueAt(rank, i));
  return values;
}

Tensor view(std::vector<float>& v) { return Tensor(v.data(), {static_cast<int64_t>(v.size())}); }

TEST_P(OutOfPlaceFrontEnd, AllreduceWritesTheOutputAndLeavesTheInput) {
  const int p = GetParam().size;
  runRanks([&](Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{262147}}) {
      auto input = rankValues<float>(comm.rank(), count);
      const auto original = input;
      std::vector<float> output(count, -1.0f);
      comm.allreduce(view(input), view(output))->wait();
      ASSERT_EQ(input, original) << "count " << count;
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(output[i], static_cast<float>(sumAt(p, i))) << "count " << count << " i " << i;
    }
    auto maxIn = rankValues<int64_t>(comm.rank(), 9);
    std::vector<int64_t> maxOut(9, -1);
    comm.allreduce(Tensor(maxIn.data(), {9}), Tensor(maxOut.data(), {3, 3}), ReduceOp::kMax)
        ->wait();
    for (size_t i = 0; i < 9; ++i) EXPECT_EQ(maxOut[i], static_cast<int64_t>(valueAt(p - 1, i)));
    auto avgIn = rankValues<double>(comm.rank(), 11);
    std::vector<double> avgOut(11);
    comm.allreduce(Tensor(avgIn.data(), {11}), Tensor(avgOut.data(), {11}), ReduceOp::kAvg)->wait();
    for (size_t i = 0; i < 11; ++i) EXPECT_DOUBLE_EQ(avgOut[i], sumAt(p, i) / p);
  });
}

// bfloat16 near 256 steps by 2: rank 0 gives 256 and the others 1.0, so the exact sum 255 + p is
// rounded once (to nearest even) only if the reduction accumulates in float32.
TEST_P(OutOfPlaceFrontEnd, Bfloat16AccumulatesInFloat32IntoTheOutput) {
  const int p = GetParam().size;
  const std::map<int, float> roundedOnce = {{1, 256}, {2, 256}, {3, 258}, {4, 260}, {7, 262}};
  runRanks([&](Communicator& comm) {
    const uint16_t bf16One = 0x3f80, bf16_256 = 0x4380;
    const uint16_t mine = comm.rank() == 0 ? bf16_256 : bf16One;
    std::vector<uint16_t> input(5, mine), output(5, 0);
    comm.allreduce(Tensor(input.data(), DataType::kBFloat16, {5}),
                   Tensor(output.data(), DataType::kBFloat16, {5}))
        ->wait();
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(input[i], mine);
      const uint32_t bits = uint32_t{output[i]} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      EXPECT_EQ(f, roundedOnce.at(p));
    }
  });
}

TEST_P(OutOfPlaceFrontEnd, BroadcastReadsTheRootsInputOnly) {
  const int p = GetParam().size;
  runRanks([&](Communicator& comm) {
    for (int root : {0, p / 2, p - 1}) {
      const bool isRoot = comm.rank() == root;
      std::vector<double> input(isRoot ? 100003 : 0, 42.5 + root);
      std::vector<double> output(100003, -1.0);
      // Elsewhere the input is empty: only the root's is read.
      comm.broadcast(Tensor(input.data(), {static_cast<int64_t>(input.size())}),
                     Tensor(output.data(), {100003}), root)
          ->wait();
      for (double v : output) ASSERT_EQ(v, 42.5 + root);
      for (double v : input) ASSERT_EQ(v, 42.5 + root);
    }
  });
}

TEST_P(OutOfPlaceFrontEnd, ReduceWritesTheRootsOutputOnly) {
  const int p = GetParam().size;
  runRanks([&](Communicator& comm) {
    for (int root : {0, p / 2, p - 1}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        auto input = rankValues<float>(comm.rank(), 77);
        const auto original = input;
        std::vector<float> output(77, -7.0f);
        comm.reduce(view(input), view(output), root, op)->wait();
        ASSERT_EQ(input, original);
        for (size_t i = 0; i < 77; ++i) {
          const double reduced = op == ReduceOp::kSum ? sumAt(p, i) : sumAt(p, i) / p;
          ASSERT_EQ(output[i], comm.rank() == root ? static_cast<float>(reduced) : -7.0f)
              << "root " << root << " i " << i;
        }
        // Elsewhere the output may be empty.
        if (comm.rank() != root)
          comm.reduce(view(input), Tensor(), root, op)->wait();
        else
          comm.reduce(view(input), view(output), root, op)->wait();
      }
    }
  });
}

// Each bad call is refused before anything is sent, on every rank, so no rank waits for another;
// the communicator works afterwards.
TEST_P(OutOfPlaceFrontEnd, ABadOutputIsRefusedWithItsReason) {
  const int p = GetParam().size;
  runRanks([&](Communicator& comm) {
    std::vector<float> input(8, 1.0f), shorter(7), buffer(12);
    std::vector<int32_t> ints(8);
    auto refused = [&](const std::function<void()>& call, const std::string& reason) {
      try {
        call();
        ADD_FAILURE() << "accepted; expected: " << reason;
      } catch (const InvalidArgumentError& error) {
        EXPECT_NE(std::string(error.what()).find(reason), std::string::npos) << error.what();
      }
    };
    const std::string size = "must have the input's dtype and number of elements";
    refused([&] { comm.allreduce(view(input), view(shorter)); }, size);
    refused([&] { comm.allreduce(view(input), Tensor(ints.data(), {8})); }, size);
    // Each rank names itself as the root: the root's input is checked (elsewhere it is not read).
    refused([&] { comm.broadcast(view(input), view(shorter), comm.rank()); }, size);
    refused([&] { comm.reduce(view(input), Tensor(ints.data(), {8}), comm.rank()); }, size);
    const std::string overlap = "overlap without being the same tensor";
    refused([&] { comm.allreduce(Tensor(buffer.data(), {8}), Tensor(buffer.data() + 4, {8})); },
            overlap);
    refused([&] { comm.allreduce(Tensor(buffer.data() + 4, {8}), Tensor(buffer.data(), {8})); },
            overlap);
    // Adjacent is not overlapping.
    std::fill(buffer.begin(), buffer.end(), 2.0f);
    comm.allreduce(Tensor(buffer.data(), {4}), Tensor(buffer.data() + 4, {4}))->wait();
    for (int i = 4; i < 8; ++i) EXPECT_EQ(buffer[i], 2.0f * p);
  });
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* backend : {"shm", "tcp"}) {
    for (int size : {1, 2, 3, 4, 7}) all.push_back({backend, size});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(GroupSizes,
                         OutOfPlaceFrontEnd,
                         ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.backend + "_size" + std::to_string(info.param.size);
                         });

}  // namespace
}  // namespace chorus
