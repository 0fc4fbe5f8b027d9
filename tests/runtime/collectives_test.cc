// Every collective through the public Communicator API, with ranks as threads over real TCP
// sockets (runRanks). Group sizes include non-powers of two; expected values are closed forms.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <vector>

#include "chorus/error.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

// Every collective through the front end, on each backend of one node: "shm" (native
// shared-memory allreduce and barrier, chorus's algorithms for the rest) and "tcp" (chorus's
// algorithms over sockets), at group sizes 1 to 8.
struct Case {
  std::string backend;
  int size;
};

class CollectivesTest : public ::testing::TestWithParam<Case> {
 protected:
  void runRanks(int p, const chorus::testing::RankFunction& fn) {
    chorus::testing::RankOptions options;
    options.backend = GetParam().backend;
    chorus::testing::runRanks(p, fn, options);
  }
};

// Rank r's value at index i; small integers, exact in every dtype used below.
double valueAt(int rank, size_t i) { return (rank + 1) + static_cast<double>(i % 5); }
// Sum over ranks 0..p-1 of valueAt(r, i).
double sumAt(int p, size_t i) { return p * (p + 1) / 2.0 + p * static_cast<double>(i % 5); }

template <typename T>
std::vector<T> rankValues(int rank, size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(valueAt(rank, i));
  return values;
}

TEST_P(CollectivesTest, AllreduceSumFloat32AllCounts) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{262147}}) {
      auto values = rankValues<float>(comm.rank(), count);
      comm.allreduce(Tensor(values.data(), {static_cast<int64_t>(count)}))->wait();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(values[i], static_cast<float>(sumAt(p, i))) << "count " << count << " i " << i;
      }
    }
  });
}

TEST_P(CollectivesTest, AllreduceOpsOnIntegers) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int64_t> maxValues(9, r * 10), minValues(9, r * 10 + 3), prodValues(9, 2);
    comm.allreduce(Tensor(maxValues.data(), {9}), ReduceOp::kMax)->wait();
    comm.allreduce(Tensor(minValues.data(), {9}), ReduceOp::kMin)->wait();
    comm.allreduce(Tensor(prodValues.data(), {9}), ReduceOp::kProd)->wait();
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(maxValues[i], (p - 1) * 10);
      EXPECT_EQ(minValues[i], 3);
      EXPECT_EQ(prodValues[i], int64_t{1} << p);
    }
    std::vector<int32_t> bor(5, 1 << r), band(5, (1 << r) | 0x100), bxor(5, 1 << r);
    comm.allreduce(Tensor(bor.data(), {5}), ReduceOp::kBor)->wait();
    comm.allreduce(Tensor(band.data(), {5}), ReduceOp::kBand)->wait();
    comm.allreduce(Tensor(bxor.data(), {5}), ReduceOp::kBxor)->wait();
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(bor[i], (1 << p) - 1);
      EXPECT_EQ(band[i], p == 1 ? 0x101 : 0x100);
      EXPECT_EQ(bxor[i], (1 << p) - 1);
    }
  });
}

TEST_P(CollectivesTest, AllreduceAvgFloat64AndInt32) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    auto values = rankValues<double>(comm.rank(), 11);
    comm.allreduce(Tensor(values.data(), {11}), ReduceOp::kAvg)->wait();
    for (size_t i = 0; i < 11; ++i) EXPECT_DOUBLE_EQ(values[i], sumAt(p, i) / p);
    // Integers: the sum (p * 7 + p(p-1)/2) divided by p, truncated toward zero.
    std::vector<int32_t> ints(3, 7 + comm.rank());
    comm.allreduce(Tensor(ints.data(), {3}), ReduceOp::kAvg)->wait();
    for (int v : ints) EXPECT_EQ(v, (p * 7 + p * (p - 1) / 2) / p);
  });
}

TEST_P(CollectivesTest, FusedAllreduceOfSeveralTensors) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    auto a = rankValues<float>(comm.rank(), 3);
    std::vector<float> empty;
    auto b = rankValues<float>(comm.rank(), 1001);
    comm.allreduce(
            {Tensor(a.data(), {3}), Tensor(empty.data(), {0}), Tensor(b.data(), {7, 11, 13})})
        ->wait();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], sumAt(p, i));
    for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], sumAt(p, i));
  });
}

// bfloat16 keeps 8 significant bits, so near 256 it steps by 2. Rank 0 contributes 256 and every
// other rank 1.0: the exact sum 255 + p rounded once to nearest-even. Rounding after each step
// would lose the ones (256 + 1 rounds back to 256).
TEST_P(CollectivesTest, Bfloat16AccumulatesInFloat32AndRoundsOnce) {
  const int p = GetParam().size;
  const std::map<int, float> roundedOnce = {{1, 256}, {2, 256}, {3, 258},
                                            {4, 260}, {7, 262}, {8, 264}};
  runRanks(p, [&](Communicator& comm) {
    const uint16_t bf16One = 0x3f80, bf16_256 = 0x4380;
    std::vector<uint16_t> values(5, comm.rank() == 0 ? bf16_256 : bf16One);
    comm.allreduce(Tensor(values.data(), DataType::kBFloat16, {5}))->wait();
    for (uint16_t v : values) {
      uint32_t bits = uint32_t{v} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      EXPECT_EQ(f, roundedOnce.at(p));
    }
  });
}

// The same rounding on the paths of large messages (chunked on shm, which reduces half types
// itself without widening them) for allreduce, reduce and reduce_scatter: every element of the
// result is the exact sum rounded once.
TEST_P(CollectivesTest, Bfloat16RoundsOnceInLargeReductions) {
  const int p = GetParam().size;
  const std::map<int, float> roundedOnce = {{1, 256}, {2, 256}, {3, 258},
                                            {4, 260}, {7, 262}, {8, 264}};
  const uint16_t bf16One = 0x3f80, bf16_256 = 0x4380;
  auto asFloat = [](uint16_t v) {
    const uint32_t bits = uint32_t{v} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  runRanks(p, [&](Communicator& comm) {
    const int64_t count = 300007 * p;  // > 512 KiB per rank: past every small-message path
    const uint16_t mine = comm.rank() == 0 ? bf16_256 : bf16One;
    std::vector<uint16_t> values(count, mine), reduced(count, 0), chunk(count / p, 0);
    comm.allreduce(Tensor(values.data(), DataType::kBFloat16, {count}),
                   Tensor(reduced.data(), DataType::kBFloat16, {count}))
        ->wait();
    comm.reduceScatter(Tensor(values.data(), DataType::kBFloat16, {count}),
                       Tensor(chunk.data(), DataType::kBFloat16, {count / p}))
        ->wait();
    const int root = p - 1;
    comm.reduce(Tensor(values.data(), DataType::kBFloat16, {count}), root)->wait();
    size_t wrong = 0;
    for (uint16_t v : reduced) wrong += asFloat(v) != roundedOnce.at(p);
    for (uint16_t v : chunk) wrong += asFloat(v) != roundedOnce.at(p);
    for (uint16_t v : values)
      wrong += asFloat(v) != (comm.rank() == root ? roundedOnce.at(p) : asFloat(mine));
    EXPECT_EQ(wrong, 0u) << "rank " << comm.rank();
  });
}

TEST_P(CollectivesTest, Float16Sum) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    // 0.5 * (r + 1) in float16: 0x3800 is 0.5, 0x3c00 is 1.0 ... built from exact halves.
    const uint16_t table[] = {0x3800, 0x3c00, 0x3e00, 0x4000, 0x4100, 0x4200, 0x4300, 0x4400};
    std::vector<uint16_t> values(9, table[comm.rank()]);
    comm.allreduce(Tensor(values.data(), DataType::kFloat16, {9}))->wait();
    // Sum of 0.5 * (r + 1) = p(p+1)/4: for p in {1,2,3,4,7,8}: 0.5, 1.5, 3, 5, 14, 18.
    const std::map<int, uint16_t> expected = {{1, 0x3800}, {2, 0x3e00}, {3, 0x4200},
                                              {4, 0x4500}, {7, 0x4b00}, {8, 0x4c80}};
    for (uint16_t v : values) EXPECT_EQ(v, expected.at(p));
  });
}

TEST_P(CollectivesTest, ReduceScatter) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const size_t n = 13;
    auto input = rankValues<float>(comm.rank(), n * p);
    std::vector<float> output(n, -1);
    comm.reduceScatter(Tensor(input.data(), {static_cast<int64_t>(n * p)}),
                       Tensor(output.data(), {static_cast<int64_t>(n)}))
        ->wait();
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(output[i], sumAt(p, comm.rank() * n + i));
  });
}

TEST_P(CollectivesTest, AllgatherAlongAxis0And1) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int32_t> input = {r * 10,     r * 10 + 1, r * 10 + 2,
                                  r * 10 + 3, r * 10 + 4, r * 10 + 5};  // shape [2, 3]
    std::vector<int32_t> rows(6 * p), cols(6 * p);
    comm.allgather(Tensor(input.data(), {2, 3}), Tensor(rows.data(), {2 * p, 3}), 0)->wait();
    comm.allgather(Tensor(input.data(), {2, 3}), Tensor(cols.data(), {2, 3 * p}), 1)->wait();
    for (int q = 0; q < p; ++q) {
      for (int i = 0; i < 6; ++i) EXPECT_EQ(rows[q * 6 + i], q * 10 + i);
      for (int row = 0; row < 2; ++row) {
        for (int c = 0; c < 3; ++c) EXPECT_EQ(cols[row * 3 * p + q * 3 + c], q * 10 + row * 3 + c);
      }
    }
  });
}

// In place (input = this rank's block of the output), small (inline), chunked and large: every
// block ends as its rank wrote it; an input that overlaps the output otherwise is refused.
TEST_P(CollectivesTest, AllgatherInPlace) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int64_t count : {int64_t{3}, int64_t{5000}, int64_t{300001}}) {
      std::vector<int64_t> all(count * p, -1);
      for (int64_t i = 0; i < count; ++i) all[r * count + i] = 1000000 * r + i;
      comm.allgather(Tensor(all.data() + r * count, {count}), Tensor(all.data(), {count * p}))
          ->wait();
      int64_t wrong = 0;
      for (int q = 0; q < p; ++q) {
        for (int64_t i = 0; i < count; ++i) wrong += all[q * count + i] != 1000000 * q + i;
      }
      EXPECT_EQ(wrong, 0) << "count " << count;
    }
    std::vector<int64_t> all(4 * p, 0);
    const int other = (r + 1) % p;
    if (p > 1) {
      EXPECT_THROW(comm.allgather(Tensor(all.data() + other * 4, {4}), Tensor(all.data(), {4 * p})),
                   InvalidArgumentError);
    }
    std::vector<int64_t> spare(4 * p + 1, 0);  // block r, one element off
    EXPECT_THROW(
        comm.allgather(Tensor(spare.data() + r * 4 + 1, {4}), Tensor(spare.data(), {4 * p})),
        InvalidArgumentError);
  });
}

// reduce_scatter, and gather and scatter at their root, write an output that is not laid over
// the input: tensors that share memory are refused at the call (every rank here passes them, to
// itself as root), before anything is issued, and the communicator goes on working.
TEST_P(CollectivesTest, OverlappingInputAndOutputAreRefusedWhereTheyCannotShare) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> memory(6 * p, 1.0f);
    const Tensor whole(memory.data(), {4 * p});
    const Tensor block(memory.data() + 4 * r, {4});    // this rank's block of `whole`
    const Tensor shifted(memory.data() + p, {4 * p});  // overlaps `whole`, p elements on
    EXPECT_THROW(comm.reduceScatter(whole, block), InvalidArgumentError);
    EXPECT_THROW(comm.reduceScatter(shifted, Tensor(memory.data() + 2 * p, {4})),
                 InvalidArgumentError);
    EXPECT_THROW(comm.gather(block, whole, r), InvalidArgumentError);
    EXPECT_THROW(comm.scatter(whole, block, r), InvalidArgumentError);
    // Separate tensors still work: each rank's block of the sum of every rank's ones.
    std::vector<float> mine(4);
    comm.reduceScatter(whole, Tensor(mine.data(), {4}))->wait();
    EXPECT_EQ(mine, std::vector<float>(4, static_cast<float>(p)));
  });
}

TEST_P(CollectivesTest, BroadcastAndReduceFromSeveralRoots) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    for (int root : {0, p / 2, p - 1}) {
      std::vector<double> data(100003, comm.rank() == root ? 42.5 + root : -1.0);
      comm.broadcast(Tensor(data.data(), {100003}), root)->wait();
      for (double v : data) ASSERT_EQ(v, 42.5 + root);

      auto values = rankValues<int64_t>(comm.rank(), 77);
      auto original = values;
      comm.reduce(Tensor(values.data(), {77}), root)->wait();
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(values[i], comm.rank() == root ? static_cast<int64_t>(sumAt(p, i)) : original[i]);
      }
    }
  });
}

TEST_P(CollectivesTest, GatherAndScatter) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int root = p - 1;
    std::vector<int64_t> mine = {comm.rank(), 100 + comm.rank()};
    std::vector<int64_t> gathered(comm.rank() == root ? 2 * p : 0, -1);
    comm.gather(Tensor(mine.data(), {2}),
                Tensor(gathered.data(), {static_cast<int64_t>(gathered.size())}), root)
        ->wait();
    if (comm.rank() == root) {
      for (int q = 0; q < p; ++q) {
        EXPECT_EQ(gathered[2 * q], q);
        EXPECT_EQ(gathered[2 * q + 1], 100 + q);
      }
    }
    std::vector<float> source(comm.rank() == 0 ? 3 * p : 0);
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i);
    std::vector<float> part(3, -1);
    comm.scatter(Tensor(source.data(), {static_cast<int64_t>(source.size())}),
                 Tensor(part.data(), {3}), 0)
        ->wait();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(part[i], comm.rank() * 3 + i);
  });
}

TEST_P(CollectivesTest, AllToAllWithSplitAndConcatAxes) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    // Input [p, 2]: row j goes to rank j and holds (r, j). Output [p, 2]: row q came from rank q.
    std::vector<int32_t> input(2 * p), output(2 * p, -1);
    for (int j = 0; j < p; ++j) {
      input[2 * j] = r;
      input[2 * j + 1] = j;
    }
    comm.allToAll(Tensor(input.data(), {p, 2}), Tensor(output.data(), {p, 2}))->wait();
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(output[2 * q], q);
      EXPECT_EQ(output[2 * q + 1], r);
    }
    // Split along axis 1 of [2, p] (column j to rank j), concatenate along axis 0: output [2p, 1].
    std::vector<int32_t> wide(2 * p), tall(2 * p, -1);
    for (int row = 0; row < 2; ++row) {
      for (int j = 0; j < p; ++j) wide[row * p + j] = r * 1000 + row * 100 + j;
    }
    comm.allToAll(Tensor(wide.data(), {2, p}), Tensor(tall.data(), {2 * p, 1}), 1, 0)->wait();
    for (int q = 0; q < p; ++q) {
      for (int row = 0; row < 2; ++row) EXPECT_EQ(tall[q * 2 + row], q * 1000 + row * 100 + r);
    }
  });
}

TEST_P(CollectivesTest, SendRecvAroundARingAndBarrier) {
  const int p = GetParam().size;
  if (p == 1)
    GTEST_SKIP() << "send/recv needs a peer";
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> out(1000, static_cast<float>(r)), in(1000, -1);
    auto sent = comm.send(Tensor(out.data(), {1000}), (r + 1) % p, 7);
    auto received = comm.recv(Tensor(in.data(), {1000}), (r + p - 1) % p, 7);
    sent->wait();
    received->wait();
    for (float v : in) ASSERT_EQ(v, static_cast<float>((r + p - 1) % p));
    comm.barrier()->wait();
  });
}

// Rank 0 receives from any source, twice per peer: each Work's sourceRank() names the sender, whose
// messages carry its rank, and one sender's two messages arrive in the order sent. A recv naming
// its peer reports that peer; a recv from any source alone in a group of one is refused.
TEST_P(CollectivesTest, RecvFromAnySourceLearnsTheSender) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int64_t> one(3);
    if (p == 1) {
      EXPECT_THROW(comm.recv(Tensor(one.data(), {3}), Communicator::kAnySource, 9),
                   InvalidArgumentError);
      return;
    }
    if (r != 0) {
      std::vector<int64_t> first(3, 100 * r), second(3, 100 * r + 1);
      comm.send(Tensor(first.data(), {3}), 0, 9)->wait();
      comm.send(Tensor(second.data(), {3}), 0, 9)->wait();
      std::vector<int64_t> named(3, 7 * r);
      auto sent = comm.send(Tensor(named.data(), {3}), 0, 10);
      sent->wait();
      EXPECT_EQ(sent->sourceRank(), -1);
      comm.barrier()->wait();
      return;
    }
    std::vector<std::vector<int64_t>> in(2 * (p - 1), std::vector<int64_t>(3, -1));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& buffer : in)
      works.push_back(comm.recv(Tensor(buffer.data(), {3}), Communicator::kAnySource, 9));
    std::map<int, std::vector<int64_t>> bySender;
    for (size_t k = 0; k < in.size(); ++k) {
      works[k]->wait();
      const int sender = works[k]->sourceRank();
      EXPECT_TRUE(sender > 0 && sender < p) << sender;  // not ASSERT: every recv is waited for
      EXPECT_EQ(in[k], std::vector<int64_t>(3, in[k][0]));
      EXPECT_EQ(in[k][0] / 100, sender);
      bySender[sender].push_back(in[k][0]);
    }
    for (int sender = 1; sender < p; ++sender) {
      EXPECT_EQ(bySender[sender], (std::vector<int64_t>{100 * sender, 100 * sender + 1}));
    }
    std::vector<int64_t> named(3);
    auto work = comm.recv(Tensor(named.data(), {3}), p - 1, 10);
    work->wait();
    EXPECT_EQ(work->sourceRank(), p - 1);
    for (int sender = 1; sender < p - 1; ++sender)
      comm.recv(Tensor(named.data(), {3}), sender, 10)->wait();
    comm.barrier()->wait();
  });
}

// Note [Point-to-point overlap]: receives posted before the sends their peers wait for, as in
// torch's irecv(left); isend(right). Run one at a time in call order, every rank would wait in its
// receive for ever. Small and large (past socket buffers and shared-memory chunks) messages, a
// second receive from each side on the same tag (matched in call order), and a barrier issued
// behind them.
TEST_P(CollectivesTest, ReceivesPostedBeforeTheirSendsDoNotHoldTheSendsBack) {
  const int p = GetParam().size;
  if (p == 1)
    GTEST_SKIP() << "send/recv needs a peer";
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank(), right = (r + 1) % p, left = (r + p - 1) % p;
    for (int64_t count : {int64_t{3}, int64_t{3} << 20}) {
      std::vector<int32_t> first(count, -1), second(count, -1), fromRight(count, -1);
      std::vector<int32_t> out(count), outAgain(count), outLeft(count);
      for (int64_t i = 0; i < count; ++i) {
        out[i] = r * 10 + static_cast<int32_t>(i % 7);
        outAgain[i] = r * 10 + 5000;
        outLeft[i] = r * 10 + 9000;
      }
      std::vector<std::shared_ptr<Work>> works{
          comm.recv(Tensor(first.data(), {count}), left, 4),
          comm.recv(Tensor(fromRight.data(), {count}), right, 5),
          comm.recv(Tensor(second.data(), {count}), left, 4),
          comm.send(Tensor(out.data(), {count}), right, 4),
          comm.send(Tensor(outLeft.data(), {count}), left, 5),
          comm.send(Tensor(outAgain.data(), {count}), right, 4)};
      comm.barrier()->wait();  // runs amid them (Note [Collectives and transfers together])
      for (auto& work : works) work->wait();
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(first[i], left * 10 + static_cast<int32_t>(i % 7)) << "count " << count;
        ASSERT_EQ(second[i], left * 10 + 5000) << "count " << count;
        ASSERT_EQ(fromRight[i], right * 10 + 9000) << "count " << count;
      }
    }
  });
}

TEST_P(CollectivesTest, ManyAsyncOperationsRunInCallOrder) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    std::vector<std::vector<int32_t>> buffers(50, std::vector<int32_t>(3));
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 50; ++k) {
      std::fill(buffers[k].begin(), buffers[k].end(), k + comm.rank());
      works.push_back(comm.allreduce(Tensor(buffers[k].data(), {3})));
    }
    for (auto& work : works) work->wait();
    for (int k = 0; k < 50; ++k) EXPECT_EQ(buffers[k][0], p * k + p * (p - 1) / 2);
  });
}

// Under BlockingCalls an operation issued on an idle communicator has run by the time the call
// returns (on this thread); one issued behind queued asynchronous operations waits its turn.
TEST_P(CollectivesTest, BlockingCallsRunBeforeReturningAndKeepCallOrder) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    std::vector<int32_t> queued(5, comm.rank() + 1);
    auto async = comm.allreduce(Tensor(queued.data(), {5}));
    BlockingCalls blocking;
    std::vector<int32_t> behind(3, 2);
    auto second = comm.allreduce(Tensor(behind.data(), {3}));
    second->wait();
    async->wait();
    EXPECT_EQ(queued[0], p * (p + 1) / 2);
    EXPECT_EQ(behind[0], 2 * p);
    for (int k = 0; k < 3; ++k) {
      std::vector<int64_t> value = {k + comm.rank()};
      auto work = comm.allreduce(Tensor(value.data(), {1}));
      EXPECT_TRUE(work->isCompleted());
      work->wait();
      EXPECT_EQ(value[0], p * k + p * (p - 1) / 2);
    }
  });
}

TEST_P(CollectivesTest, SplitByParityInReverseKeyOrder) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    auto sub = comm.split(r % 2, -r);
    ASSERT_NE(sub, nullptr);
    const int groupSize = (p + 1 - r % 2) / 2;  // ranks with my parity
    EXPECT_EQ(sub->size(), groupSize);
    EXPECT_EQ(sub->rank(), groupSize - 1 - r / 2);  // reverse key order
    EXPECT_EQ(sub->worldRank(), r);
    EXPECT_EQ(sub->groupId(), r % 2);
    EXPECT_EQ(sub->groupSize(), p == 1 ? 1 : 2);
    std::vector<int64_t> value = {r};
    sub->allreduce(Tensor(value.data(), {1}))->wait();
    int64_t expected = 0;
    for (int q = r % 2; q < p; q += 2) expected += q;
    EXPECT_EQ(value[0], expected);
  });
}

// Only the members call subgroup(): the odd ranks, listed from the highest, form a group while the
// even ranks go straight on to a world allreduce of their own (which the odd ranks join after).
// The same tag and members again make a second, separate communicator.
TEST_P(CollectivesTest, SubgroupIsCollectiveOverItsMembersOnly) {
  const int p = GetParam().size;
  runRanks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int> odd;
    for (int q = p - 1; q >= 0; --q)
      if (q % 2 == 1)
        odd.push_back(q);
    if (r % 2 == 1) {
      auto first = comm.subgroup(odd, "odd");
      auto second = comm.subgroup(odd, "odd");
      for (const auto& sub : {first, second}) {
        ASSERT_NE(sub, nullptr);
        EXPECT_EQ(sub->size(), static_cast<int>(odd.size()));
        EXPECT_EQ(sub->rank(), static_cast<int>(odd.size()) - 1 - r / 2);  // listed from the top
        EXPECT_EQ(sub->worldRank(), r);
        std::vector<int64_t> value = {r};
        sub->allreduce(Tensor(value.data(), {1}))->wait();
        int64_t expected = 0;
        for (int q : odd) expected += q;
        EXPECT_EQ(value[0], expected);
      }
      EXPECT_NE(first.get(), second.get());
    }
    std::vector<int64_t> all = {1};
    comm.allreduce(Tensor(all.data(), {1}))->wait();
    EXPECT_EQ(all[0], p);
    EXPECT_THROW(comm.subgroup({r, r}, "twice"), InvalidArgumentError);
    EXPECT_THROW(comm.subgroup({r, p}, "outside"), InvalidArgumentError);
    if (p > 1) {
      EXPECT_THROW(comm.subgroup({(r + 1) % p}, "not me"), InvalidArgumentError);
    }
  });
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* backend : {"shm", "tcp"}) {
    for (int size : {1, 2, 3, 4, 7, 8}) all.push_back({backend, size});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(GroupSizes,
                         CollectivesTest,
                         ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.backend + "_size" + std::to_string(info.param.size);
                         });

}  // namespace
}  // namespace chorus
