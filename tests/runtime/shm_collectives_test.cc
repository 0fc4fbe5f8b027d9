// The shm backend's native collectives on both of their paths, through the front end, with ranks
// as threads of this process: small calls (data in the arrival round) and chunked ones (pieces
// through the double-buffered chunk slots: one piece, several, an odd tail), each call twice so
// both slot parities are used, at group sizes 2 to 4 and several roots. Expected values are
// closed forms of (rank, block, index).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::RankOptions;

// Element i of the block that rank `from` holds for rank `to`: distinct for every triple in use.
int32_t code(int from, int to, size_t i) {
  return from * 1000000 + to * 10000 + static_cast<int32_t>(i % 9973);
}

Tensor tensorOf(std::vector<int32_t>& values) {
  return Tensor(values.data(), {static_cast<int64_t>(values.size())});
}

// Elements per rank's block: empty; small, inside the arrival record's first line (up to 32
// bytes: 3 and 8 int32 elements) and just past it (9); at the end of the record (288 bytes: 72)
// and just past it (73), though p blocks of these may not fit; small (p blocks fit the 32 KiB
// small slot up to 4 ranks); just past the small slot; and several chunk pieces with an odd tail.
const size_t kCounts[] = {0, 3, 8, 9, 72, 73, 1500, 8193, 2 * 131072 + 17};

class ShmCollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  void run(const std::function<void(Communicator&, size_t count)>& body) {
    RankOptions options;
    options.backend = "shm";
    chorus::testing::runRanks(
        GetParam(),
        [&](Communicator& comm) {
          ASSERT_EQ(comm.backendName(), "shm");
          for (size_t count : kCounts) {
            for (int round = 0; round < 2; ++round) body(comm, count);
          }
        },
        options);
  }
};

TEST_P(ShmCollectivesTest, Allgather) {
  run([](Communicator& comm, size_t count) {
    const int p = comm.size();
    std::vector<int32_t> mine(count), all(count * p, -1);
    for (size_t i = 0; i < count; ++i) mine[i] = code(comm.rank(), 0, i);
    comm.allgather(tensorOf(mine), tensorOf(all))->wait();
    for (int q = 0; q < p; ++q) {
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(all[q * count + i], code(q, 0, i)) << "count " << count << " block " << q;
    }
  });
}

TEST_P(ShmCollectivesTest, ReduceScatter) {
  run([](Communicator& comm, size_t count) {
    const int p = comm.size();
    std::vector<int32_t> input(count * p), output(count, -1);
    for (int to = 0; to < p; ++to) {
      for (size_t i = 0; i < count; ++i) input[to * count + i] = code(comm.rank(), to, i);
    }
    comm.reduceScatter(tensorOf(input), tensorOf(output))->wait();
    for (size_t i = 0; i < count; ++i) {
      int32_t expected = 0;
      for (int from = 0; from < p; ++from) expected += code(from, comm.rank(), i);
      ASSERT_EQ(output[i], expected) << "count " << count << " element " << i;
    }
  });
}

// avg is divided inside the reduction (ShmBackend::allreduceAverages): integers truncate toward
// zero, floats are the correctly rounded quotient of the exact sum.
TEST_P(ShmCollectivesTest, AllreduceAverage) {
  run([](Communicator& comm, size_t count) {
    const int p = comm.size();
    std::vector<int32_t> ints(count);
    std::vector<float> floats(count);
    for (size_t i = 0; i < count; ++i) {
      ints[i] = code(comm.rank(), 0, i) * (i % 2 == 0 ? 1 : -1);
      floats[i] = static_cast<float>(comm.rank() + static_cast<int>(i % 101));
    }
    comm.allreduce(tensorOf(ints), ReduceOp::kAvg)->wait();
    comm.allreduce(Tensor(floats.data(), {static_cast<int64_t>(count)}), ReduceOp::kAvg)->wait();
    for (size_t i = 0; i < count; ++i) {
      int64_t sum = 0;
      double floatSum = 0;
      for (int from = 0; from < p; ++from) {
        sum += int64_t{code(from, 0, i)} * (i % 2 == 0 ? 1 : -1);
        floatSum += from + static_cast<int>(i % 101);
      }
      ASSERT_EQ(ints[i], static_cast<int32_t>(sum / p)) << "count " << count << " element " << i;
      ASSERT_EQ(floats[i], static_cast<float>(floatSum / p))
          << "count " << count << " element " << i;
    }
  });
}

TEST_P(ShmCollectivesTest, AllToAll) {
  run([](Communicator& comm, size_t count) {
    const int p = comm.size();
    std::vector<int32_t> input(count * p), output(count * p, -1);
    for (int to = 0; to < p; ++to) {
      for (size_t i = 0; i < count; ++i) input[to * count + i] = code(comm.rank(), to, i);
    }
    comm.allToAll(tensorOf(input), tensorOf(output))->wait();
    for (int from = 0; from < p; ++from) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(output[from * count + i], code(from, comm.rank(), i))
            << "count " << count << " from " << from;
      }
    }
  });
}

TEST_P(ShmCollectivesTest, BroadcastAndReduceFromFirstAndLastRank) {
  run([](Communicator& comm, size_t count) {
    const int p = comm.size();
    const int me = comm.rank();
    for (int root : {0, p - 1}) {
      std::vector<int32_t> data(count, -1);
      if (me == root) {
        for (size_t i = 0; i < count; ++i) data[i] = code(root, 0, i);
      }
      comm.broadcast(tensorOf(data), root)->wait();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(data[i], code(root, 0, i)) << "count " << count;

      std::vector<int32_t> values(count);
      for (size_t i = 0; i < count; ++i) values[i] = code(me, 1, i);
      comm.reduce(tensorOf(values), root, ReduceOp::kMax)->wait();
      for (size_t i = 0; i < count; ++i) {
        // code grows with the sender, so the maximum is the last rank's value.
        ASSERT_EQ(values[i], me == root ? code(p - 1, 1, i) : code(me, 1, i)) << "count " << count;
      }
    }
  });
}

TEST_P(ShmCollectivesTest, GatherAndScatterAtFirstAndLastRank) {
  run([](Communicator& comm, size_t count) {
    const int p = comm.size();
    const int me = comm.rank();
    for (int root : {0, p - 1}) {
      std::vector<int32_t> mine(count), gathered(me == root ? count * p : 0, -1);
      for (size_t i = 0; i < count; ++i) mine[i] = code(me, root, i);
      comm.gather(tensorOf(mine), tensorOf(gathered), root)->wait();
      for (size_t j = 0; j < gathered.size(); ++j)
        ASSERT_EQ(gathered[j], code(j / count, root, j % count)) << "count " << count;

      std::vector<int32_t> source(me == root ? count * p : 0), part(count, -1);
      for (size_t j = 0; j < source.size(); ++j) source[j] = code(root, j / count, j % count);
      comm.scatter(tensorOf(source), tensorOf(part), root)->wait();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(part[i], code(root, me, i)) << "count " << count;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks,
                         ShmCollectivesTest,
                         ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "size" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus
