// Communicator::allToAllV (all_to_all with a block size per pair) and allgatherV (allgather of
// inputs of different lengths) through the front end, with ranks
// as threads of this process, on every host backend: the void backend (one rank), tcp (the
// pairwise algorithm), shm (tables in the arrival round; blocks in the small slot, read directly,
// or, with CHORUS_SHM_DIRECT=0, through the fallback: the test shm_all_to_all_v_through_slots) and
// hierarchical. Expected values are closed forms of (sender, receiver, row): rank q sends rank r
// rowsBetween(q, r) rows (some pairs none), row k of them holding code(q, r, k, i) at column i.
// allgatherV: rank q contributes rowsBetween(q, 0, scale) rows holding code(q, 0, k, i). Then the
// errors: a pair that disagrees, this rank's own pair, and bad arguments.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::RankOptions;

int64_t rowsBetween(int from, int to, int64_t scale) { return ((from + 2 * to) % 3) * scale; }

int32_t code(int from, int to, int64_t row, int64_t column) {
  return from * 1000000 + to * 100000 + static_cast<int32_t>((row * 7 + column) % 99991);
}

// Rows of `columns` int32 from rank `me` to every rank, concatenated in rank order.
struct Outgoing {
  std::vector<int64_t> splits;
  std::vector<int32_t> values;
};

Outgoing outgoing(int me, int p, int64_t scale, int64_t columns) {
  Outgoing out;
  for (int to = 0; to < p; ++to) {
    out.splits.push_back(rowsBetween(me, to, scale));
    for (int64_t k = 0; k < out.splits.back(); ++k) {
      for (int64_t i = 0; i < columns; ++i) out.values.push_back(code(me, to, k, i));
    }
  }
  return out;
}

Tensor rowsOf(std::vector<int32_t>& values, int64_t columns) {
  return Tensor(values.data(), {static_cast<int64_t>(values.size()) / columns, columns});
}

// The rows rank `to` receives from each rank, `scale` per unit of rowsBetween (to = 0 also
// serves allgatherV, whose ranks contribute rowsBetween(q, 0, scale) rows each).
std::vector<int64_t> splitsInto(int to, int p, int64_t scale) {
  std::vector<int64_t> splits;
  for (int from = 0; from < p; ++from) splits.push_back(rowsBetween(from, to, scale));
  return splits;
}

// A buffer of -1 for `splits` rows of `columns`.
std::vector<int32_t> receiveBuffer(const std::vector<int64_t>& splits, int64_t columns) {
  int64_t rows = 0;
  for (int64_t split : splits) rows += split;
  return std::vector<int32_t>(static_cast<size_t>(rows * columns), -1);
}

// `received` holds, in rank order, splits[q] rows from each rank q, row k of them holding
// code(q, as, k, i) at column i.
void expectRows(const std::vector<int32_t>& received,
                const std::vector<int64_t>& splits,
                int64_t columns,
                int as,
                const std::string& context) {
  size_t at = 0;
  for (int from = 0; from < static_cast<int>(splits.size()); ++from) {
    for (int64_t k = 0; k < splits[from]; ++k) {
      for (int64_t i = 0; i < columns; ++i, ++at) {
        ASSERT_EQ(received[at], code(from, as, k, i))
            << context << ": from rank " << from << ", row " << k << ", column " << i;
      }
    }
  }
}

// One call, checked against the closed form: `scale` rows per unit of rowsBetween.
void exchangeAndCheck(Communicator& comm, int64_t scale, int64_t columns) {
  const int me = comm.rank();
  Outgoing out = outgoing(me, comm.size(), scale, columns);
  const std::vector<int64_t> recvSplits = splitsInto(me, comm.size(), scale);
  std::vector<int32_t> received = receiveBuffer(recvSplits, columns);
  comm.allToAllV(rowsOf(out.values, columns), out.splits, rowsOf(received, columns), recvSplits)
      ->wait();
  expectRows(received, recvSplits, columns, me, "scale " + std::to_string(scale));
}

struct Case {
  std::string backend;
  int size;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.backend << " at " << c.size << " ranks"; }

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.backend + "_np" + std::to_string(info.param.size);
}

class AllToAllVTest : public ::testing::TestWithParam<Case> {
 protected:
  RankOptions options() const {
    RankOptions options;
    options.backend = GetParam().backend;
    if (options.backend == "hierarchical") {
      for (int r = 0; r < GetParam().size; ++r) options.nodeIds.push_back(r < 2 ? "a" : "b");
    }
    return options;
  }
};

// Blocks of every kind: empty pairs; small (every input travels with its table); past the shm
// small slot (read from the sender's memory, or through the fallback); each size twice, so both
// slot parities are used; and rows of one column and of many.
TEST_P(AllToAllVTest, EveryRowArrivesInRankOrder) {
  chorus::testing::runRanks(
      GetParam().size,
      [](Communicator& comm) {
        for (int64_t scale : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{3000}}) {
          for (int64_t columns : {int64_t{1}, int64_t{3}}) {
            for (int round = 0; round < 2; ++round) exchangeAndCheck(comm, scale, columns);
          }
        }
      },
      options());
}

// Many calls back to back on one communicator, alternating small and large, async: each one's
// blocks stay in their own call.
TEST_P(AllToAllVTest, AsyncCallsInARow) {
  chorus::testing::runRanks(
      GetParam().size,
      [](Communicator& comm) {
        const int p = comm.size();
        std::vector<Outgoing> outs;
        std::vector<std::vector<int32_t>> received;
        std::vector<std::shared_ptr<Work>> works;
        for (int call = 0; call < 6; ++call) {
          const int64_t scale = call % 2 == 0 ? 2 : 2000;
          outs.push_back(outgoing(comm.rank(), p, scale, 1));
        }
        std::vector<std::vector<int64_t>> recvSplits;
        for (size_t call = 0; call < outs.size(); ++call) {
          recvSplits.push_back(splitsInto(comm.rank(), p, call % 2 == 0 ? 2 : 2000));
          received.push_back(receiveBuffer(recvSplits.back(), 1));
          works.push_back(comm.allToAllV(rowsOf(outs[call].values, 1), outs[call].splits,
                                         rowsOf(received[call], 1), recvSplits[call]));
        }
        for (auto& work : works) work->wait();
        for (size_t call = 0; call < outs.size(); ++call)
          expectRows(received[call], recvSplits[call], 1, comm.rank(),
                     "call " + std::to_string(call));
      },
      options());
}

// A call whose pairs disagree: every rank raises the same MismatchError, naming the pair, and
// none hangs. Rank `me` passes `sendSplits` / `recvSplits` over int32 rows of one element.
void expectSplitMismatch(Communicator& comm,
                         const std::vector<int64_t>& sendSplits,
                         const std::vector<int64_t>& recvSplits,
                         const std::string& expected,
                         const std::vector<int>& ranks) {
  int64_t inRows = 0, outRows = 0;
  for (int64_t rows : sendSplits) inRows += rows;
  for (int64_t rows : recvSplits) outRows += rows;
  std::vector<int32_t> input(static_cast<size_t>(inRows), 7), output(static_cast<size_t>(outRows));
  try {
    comm.allToAllV(Tensor(input.data(), {inRows}), sendSplits, Tensor(output.data(), {outRows}),
                   recvSplits)
        ->wait();
    ADD_FAILURE() << "rank " << comm.rank() << ": no error";
  } catch (const MismatchError& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    EXPECT_EQ(error.field(), "bytes");
    EXPECT_EQ(error.ranks(), ranks);
  }
}

// Rank p-1 expects one row fewer from rank 0 than rank 0 sends it (its output is one row shorter,
// so that its own sizes add up).
TEST_P(AllToAllVTest, APairThatDisagreesFailsEveryRankNamingIt) {
  if (GetParam().size < 2)
    GTEST_SKIP() << "needs two ranks";
  chorus::testing::runRanks(
      GetParam().size,
      [](Communicator& comm) {
        const int p = comm.size();
        std::vector<int64_t> sendSplits(p, 2), recvSplits(p, 2);
        if (comm.rank() == p - 1)
          recvSplits[0] = 1;
        expectSplitMismatch(comm, sendSplits, recvSplits,
                            "rank 0 sends 8 bytes to rank " + std::to_string(p - 1) +
                                ", which expects 4 bytes from it",
                            {0, p - 1});
      },
      options());
}

// Rank 1 sends itself two rows but expects one: only it holds both numbers, and every rank raises.
TEST_P(AllToAllVTest, ARanksOwnPairThatDisagreesFailsEveryRank) {
  if (GetParam().size < 2)
    GTEST_SKIP() << "needs two ranks";
  chorus::testing::runRanks(
      GetParam().size,
      [](Communicator& comm) {
        std::vector<int64_t> sendSplits(comm.size(), 1), recvSplits(comm.size(), 1);
        if (comm.rank() == 1)
          sendSplits[1] = 2;
        expectSplitMismatch(comm, sendSplits, recvSplits,
                            "rank 1 sends 8 bytes to rank 1, which expects 4 bytes from it",
                            {1, 1});
      },
      options());
}

// Every rank's rows, in rank order, some ranks contributing none; both slot parities; each size
// twice.
TEST_P(AllToAllVTest, AllgatherVConcatenatesEveryRanksRows) {
  chorus::testing::runRanks(
      GetParam().size,
      [](Communicator& comm) {
        const int p = comm.size();
        for (int64_t scale : {int64_t{1}, int64_t{4}, int64_t{5000}}) {
          for (int round = 0; round < 2; ++round) {
            std::vector<int32_t> mine;
            for (int64_t k = 0; k < rowsBetween(comm.rank(), 0, scale); ++k) {
              for (int64_t i = 0; i < 3; ++i) mine.push_back(code(comm.rank(), 0, k, i));
            }
            const std::vector<int64_t> recvSplits = splitsInto(0, p, scale);
            std::vector<int32_t> all = receiveBuffer(recvSplits, 3);
            comm.allgatherV(rowsOf(mine, 3), rowsOf(all, 3), recvSplits)->wait();
            expectRows(all, recvSplits, 3, 0, "scale " + std::to_string(scale));
          }
        }
      },
      options());
}

// The last rank expects one row more from rank 0 than rank 0 has.
TEST_P(AllToAllVTest, AllgatherVOfCountsThatDisagreeFailsEveryRank) {
  if (GetParam().size < 2)
    GTEST_SKIP() << "needs two ranks";
  chorus::testing::runRanks(
      GetParam().size,
      [](Communicator& comm) {
        const int p = comm.size();
        std::vector<int64_t> recvSplits(p, 2);
        if (comm.rank() == p - 1)
          recvSplits[0] = 3;
        std::vector<int32_t> mine(2, 7), all(static_cast<size_t>(2 * p + 1));
        const int64_t rows = comm.rank() == p - 1 ? 2 * p + 1 : 2 * p;
        try {
          comm.allgatherV(Tensor(mine.data(), {2}), Tensor(all.data(), {rows}), recvSplits)->wait();
          ADD_FAILURE() << "rank " << comm.rank() << ": no error";
        } catch (const MismatchError& error) {
          EXPECT_NE(std::string(error.what())
                        .find("rank 0 sends 8 bytes to rank " + std::to_string(p - 1) +
                              ", which expects 12 bytes from it"),
                    std::string::npos)
              << error.what();
        }
      },
      options());
}

std::vector<Case> cases() {
  std::vector<Case> all{{"auto", 1}};
  for (const char* backend : {"tcp", "shm"}) {
    for (int size : {2, 3, 4}) all.push_back({backend, size});
  }
  all.push_back({"hierarchical", 4});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Backends, AllToAllVTest, ::testing::ValuesIn(cases()), caseName);

TEST(AllToAllVArgumentsTest, BadArgumentsAreRefusedNamingWhatIsWrong) {
  chorus::testing::runRanks(1, [](Communicator& comm) {
    std::vector<int32_t> values(6, 0), other(6, 0);
    std::vector<float> floats(6, 0);
    const Tensor in(values.data(), {6});
    const Tensor out(other.data(), {6});
    auto refuses = [&](const std::string& expected, auto&& call) {
      try {
        call();
        ADD_FAILURE() << "no error; expected " << expected;
      } catch (const InvalidArgumentError& error) {
        EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
      }
    };
    const std::vector<int64_t> six{6};
    refuses("send_splits has 2 entries", [&] {
      comm.allToAllV(in, std::vector<int64_t>{3, 3}, out, six);
    });
    refuses("recv_splits has a negative entry",
            [&] { comm.allToAllV(in, six, Tensor(other.data(), {0}), std::vector<int64_t>{-1}); });
    refuses("send_splits add up to 5 rows",
            [&] { comm.allToAllV(in, std::vector<int64_t>{5}, out, six); });
    refuses("must have one dtype",
            [&] { comm.allToAllV(in, six, Tensor(floats.data(), {6}), six); });
    refuses("same dimensions after the first", [&] {
      comm.allToAllV(Tensor(values.data(), {3, 2}), std::vector<int64_t>{3},
                     Tensor(other.data(), {2, 3}), std::vector<int64_t>{2});
    });
    refuses("overlaps", [&] {
      comm.allToAllV(Tensor(values.data(), {4}), std::vector<int64_t>{4},
                     Tensor(values.data() + 2, {4}), std::vector<int64_t>{4});
    });
    refuses("needs",
            [&] { comm.allToAllV(Tensor(values.data(), {}), std::vector<int64_t>{1}, out, six); });
    refuses("allgather_v: recv_splits add up to 5 rows",
            [&] { comm.allgatherV(in, out, std::vector<int64_t>{5}); });
    // None of those reached the communicator: it still works.
    comm.allToAllV(in, six, out, six)->wait();
  });
}

// Splits whose sum wraps around int64 to the rows there are (0 here) are refused too, not taken
// for that sum: the blocks' byte sizes would overflow next.
TEST(AllToAllVArgumentsTest, SplitsWhoseSumWrapsAroundAreRefused) {
  chorus::testing::runRanks(3, [](Communicator& comm) {
    std::vector<int32_t> none;
    const Tensor empty(none.data(), {0});
    constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
    const std::vector<int64_t> wraps{kHuge, kHuge, 2}, zeros{0, 0, 0};  // 2^64: 0 once wrapped
    try {
      comm.allToAllV(empty, wraps, empty, zeros)->wait();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& error) {
      EXPECT_NE(std::string(error.what()).find("send_splits add up to more than the 0 rows"),
                std::string::npos)
          << error.what();
    }
    try {
      comm.allgatherV(empty, empty, wraps)->wait();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& error) {
      EXPECT_NE(std::string(error.what()).find("recv_splits add up to more than the 0 rows"),
                std::string::npos)
          << error.what();
    }
    comm.allToAllV(empty, zeros, empty, zeros)->wait();  // nothing reached the communicator
  });
}

}  // namespace
}  // namespace chorus
