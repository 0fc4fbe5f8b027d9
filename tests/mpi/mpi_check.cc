// A real multi-process check of chorus under mpirun (see CMakeLists.txt), for what
// collectives_check does not cover: the MPI backend's fallbacks (float16, bfloat16), bool, bitwise
// ops, point-to-point with tags, split and rank_list groups, and coexistence with a program that
// owns MPI itself.
//
//   mpi_check            chorus initializes MPI (and finalizes it at exit)
//   mpi_check --own-mpi  the program calls MPI_Init_thread(MPI_THREAD_MULTIPLE) first, uses its
//                        own MPI_COMM_WORLD traffic between chorus calls, then calls MPI_Finalize
//                        itself: chorus must neither finalize MPI nor touch it afterwards
//   mpi_check --serialized  the program initializes MPI with MPI_THREAD_SERIALIZED: chorus must
//                        refuse with UnsupportedError naming MPI_THREAD_MULTIPLE
//   mpi_check --timeout  rank 0 skips an allreduce: the others time out (run with a short
//                        CHORUS_TIMEOUT) instead of hanging
//   mpi_check --mismatch rank 0 calls differently from the others (count, op, dtype, root,
//                        all_to_all_v's bytes, collective): every rank raises MismatchError naming
//                        the field and ranks
//
// Expected values are closed forms. Prints "mpi_check: OK on N ranks" on rank 0 when every rank
// passed (failures are summed over the world), and exits nonzero otherwise.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace {

int failures = 0;

void check(bool ok, const char* what, int rank) {
  if (ok)
    return;
  ++failures;
  std::fprintf(stderr, "rank %d: %s is wrong\n", rank, what);
}

// float16 bit patterns of the small integers 1..8 (sign 0, exponent bias 15).
uint16_t halfOf(int value) {
  static const uint16_t kHalf[] = {0,      0x3C00, 0x4000, 0x4200, 0x4400,
                                   0x4500, 0x4600, 0x4700, 0x4800};
  return kHalf[value];
}

// bfloat16 of small integers: the top 16 bits of the float32.
uint16_t bfloatOf(int value) {
  float f = static_cast<float>(value);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

void checkFallbacks(chorus::Communicator& comm) {
  using chorus::DataType;
  using chorus::Tensor;
  const int p = comm.size();
  const int r = comm.rank();
  // float16 and bfloat16 sums: MPI has no such types, so the MPI backend falls back.
  std::vector<uint16_t> half(5, halfOf(1));
  comm.allreduce(Tensor(half.data(), DataType::kFloat16, {5}))->wait();
  check(half == std::vector<uint16_t>(5, halfOf(p)), "float16 allreduce", r);
  std::vector<uint16_t> bf(3, bfloatOf(1));
  comm.allreduce(Tensor(bf.data(), DataType::kBFloat16, {3}))->wait();
  check(bf == std::vector<uint16_t>(3, bfloatOf(p)), "bfloat16 allreduce", r);
  // bool: chorus's sum is "or" and min is "and" (MPI_LOR and MPI_LAND on MPI_C_BOOL).
  std::vector<uint8_t> anyOf(3, r == 0 ? 1 : 0);
  comm.allreduce(Tensor(anyOf.data(), DataType::kBool, {3}))->wait();
  check(anyOf == std::vector<uint8_t>(3, 1), "bool sum allreduce", r);
  std::vector<uint8_t> allOf(2, r == 0 ? 1 : 0);
  comm.allreduce(Tensor(allOf.data(), DataType::kBool, {2}), chorus::ReduceOp::kMin)->wait();
  check(allOf == std::vector<uint8_t>(2, p == 1 ? 1 : 0), "bool min allreduce", r);
  // Bitwise ops: rank r contributes bit r; every bit is set by exactly one rank.
  std::vector<int32_t> bits(4, 1 << r);
  comm.allreduce(Tensor(bits.data(), {4}), chorus::ReduceOp::kBor)->wait();
  check(bits == std::vector<int32_t>(4, (1 << p) - 1), "int32 bor allreduce", r);
  std::vector<int64_t> ones(2, 0x7f | (int64_t{1} << (8 + r)));
  comm.allreduce(Tensor(ones.data(), {2}), chorus::ReduceOp::kBand)->wait();
  check(ones == std::vector<int64_t>(2, 0x7f), "int64 band allreduce", r);
  // max and avg.
  std::vector<float> values = {static_cast<float>(r), static_cast<float>(2 * r)};
  comm.allreduce(Tensor(values.data(), {2}), chorus::ReduceOp::kMax)->wait();
  check(values == std::vector<float>{float(p - 1), float(2 * (p - 1))}, "float max allreduce", r);
  std::vector<double> avg(3, r);
  comm.allreduce(Tensor(avg.data(), {3}), chorus::ReduceOp::kAvg)->wait();
  check(avg == std::vector<double>(3, (p - 1) / 2.0), "float64 avg allreduce", r);
}

void checkPointToPoint(chorus::Communicator& comm) {
  using chorus::Tensor;
  const int p = comm.size();
  const int r = comm.rank();
  // A ring: send to the right with tag 7 (and tag 3 second), receive from the left.
  std::vector<int64_t> out7(6, 100 + r);
  std::vector<int64_t> out3(2, 200 + r);
  std::vector<int64_t> in7(6, -1);
  std::vector<int64_t> in3(2, -1);
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  auto s7 = comm.send(Tensor(out7.data(), {6}), right, 7);
  auto s3 = comm.send(Tensor(out3.data(), {2}), right, 3);
  comm.recv(Tensor(in3.data(), {2}), left, 3)->wait();
  comm.recv(Tensor(in7.data(), {6}), left, 7)->wait();
  s7->wait();
  s3->wait();
  check(in7 == std::vector<int64_t>(6, 100 + left) && in3 == std::vector<int64_t>(2, 200 + left),
        "send/recv", r);
}

void checkGroups(chorus::Communicator& world) {
  using chorus::Tensor;
  const int p = world.size();
  const int r = world.rank();
  // split by parity, ordered by descending rank.
  auto half = world.split(r % 2, -r);
  const int members = (p - r % 2 + 1) / 2;
  check(half->size() == members, "split size", r);
  int64_t sum = r;
  half->allreduce(Tensor(&sum, {1}))->wait();
  int64_t expected = 0;
  for (int q = r % 2; q < p; q += 2) expected += q;
  check(sum == expected, "split allreduce", r);
  // rank_list [[0, 1], [2, 3, ...]] through the context's pool.
  chorus::RankList rankList = {{0, 1}, {}};
  for (int q = 2; q < p; ++q) rankList[1].push_back(q);
  if (p > 2) {
    auto group = chorus::DistContext::get().communicator(rankList);
    int64_t value = r + 1;
    group->allreduce(Tensor(&value, {1}))->wait();
    const int64_t groupSum = r < 2 ? 3 : (p * (p + 1)) / 2 - 3;
    check(value == groupSum, "rank_list allreduce", r);
  }
}

// Within the program's own MPI: an MPI_Allreduce of one int on MPI_COMM_WORLD.
void checkOwnTraffic(int r, int p) {
  int value = r + 1;
  int total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  check(total == p * (p + 1) / 2, "the program's own MPI_Allreduce", r);
}

int serialized() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  bool refused = false;
  try {
    chorus::DistContext::get().communicator();
  } catch (const chorus::UnsupportedError& error) {
    refused = std::string(error.what()).find("MPI_THREAD_MULTIPLE") != std::string::npos;
  }
  check(refused, "refusing MPI_THREAD_SERIALIZED", r);
  MPI_Finalize();
  if (r == 0 && failures == 0)
    std::printf("mpi_check: OK (MPI_THREAD_SERIALIZED refused)\n");
  return failures == 0 ? 0 : 1;
}

// Rank 0 skips an allreduce: the others must get a TimeoutError by the deadline (CHORUS_TIMEOUT)
// that names the operation and rank 0 alone (its missingRanks() and its message), never hang, and
// later calls on that communicator must fail at once.
int timeout() {
  auto world = chorus::DistContext::get().communicator();
  const int r = world->rank();
  bool timedOut = r == 0;
  if (r != 0) {
    std::vector<float> values(8, 1.0f);
    try {
      world->allreduce(chorus::Tensor(values.data(), {8}))->wait();
    } catch (const chorus::TimeoutError& error) {
      const std::string what = error.what();
      std::printf("rank %d: %s\n", r, what.c_str());
      timedOut = what.find("allreduce #1 (float32 x 8, sum) timed out") != std::string::npos &&
                 what.find("waiting for rank 0;") != std::string::npos &&
                 error.missingRanks() == std::vector<int>{0};
    }
    try {
      world->barrier()->wait();
      timedOut = false;
    } catch (const chorus::Error&) {
    }
  }
  check(timedOut, "the timeout of a missing rank", r);
  // Rank 0 stays alive until the others timed out: were it to exit, a backend that sees peers
  // close (shm) would rightly report that instead of a timeout. MPI's own barrier, not chorus's.
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0 && failures == 0)
    std::printf("mpi_check: OK (timeout, backend %s)\n", world->backendName().c_str());
  return failures == 0 ? 0 : 1;
}

// One way for rank 0's call to differ from the others': `call(comm, odd)` runs the odd variant on
// rank 0; every rank must raise MismatchError with field `field`, naming two ranks, one of them 0.
struct MismatchCase {
  const char* field;
  std::function<void(chorus::Communicator&, bool odd)> call;
  bool ownPair = false;  // rank 0 disagrees with itself: the error names rank 0 twice
};

const MismatchCase kMismatchCases[] = {
    {"count",
     [](chorus::Communicator& comm, bool odd) {
       std::vector<float> v(odd ? 5 : 4, 1.0f);
       comm.allreduce(chorus::Tensor(v.data(), {static_cast<int64_t>(v.size())}))->wait();
     }},
    {"reduce_op",
     [](chorus::Communicator& comm, bool odd) {
       std::vector<float> v(4, 1.0f);
       auto op = odd ? chorus::ReduceOp::kMax : chorus::ReduceOp::kSum;
       comm.allreduce(chorus::Tensor(v.data(), {4}), op)->wait();
     }},
    {"dtype",
     [](chorus::Communicator& comm, bool odd) {
       std::vector<float> f(4, 1.0f);
       std::vector<int32_t> i(4, 1);
       comm.allreduce(odd ? chorus::Tensor(i.data(), {4}) : chorus::Tensor(f.data(), {4}))->wait();
     }},
    {"root",
     [](chorus::Communicator& comm, bool odd) {
       std::vector<int64_t> v(3, comm.rank());
       comm.broadcast(chorus::Tensor(v.data(), {3}), odd ? 1 : 0)->wait();
     }},
    {"bytes",  // rank 0 expects one row fewer from rank 1 than rank 1 sends it
     [](chorus::Communicator& comm, bool odd) {
       const int p = comm.size();
       std::vector<int64_t> sendSplits(p, 2), recvSplits(p, 2);
       if (odd)
         recvSplits[1] = 1;
       std::vector<float> in(2 * p, 1.0f), out(2 * p, 0.0f);
       const int64_t outRows = odd ? 2 * p - 1 : 2 * p;
       comm.allToAllV(chorus::Tensor(in.data(), {2 * p}), sendSplits,
                      chorus::Tensor(out.data(), {outRows}), recvSplits)
           ->wait();
     }},
    {"bytes",  // rank 0 sends itself three rows but expects two
     [](chorus::Communicator& comm, bool odd) {
       const int p = comm.size();
       std::vector<int64_t> sendSplits(p, 2), recvSplits(p, 2);
       if (odd)
         sendSplits[0] = 3;
       std::vector<float> in(2 * p + 1, 1.0f), out(2 * p, 0.0f);
       const int64_t inRows = odd ? 2 * p + 1 : 2 * p;
       comm.allToAllV(chorus::Tensor(in.data(), {inRows}), sendSplits,
                      chorus::Tensor(out.data(), {2 * p}), recvSplits)
           ->wait();
     },
     true},
    {"collective",
     [](chorus::Communicator& comm, bool odd) {
       std::vector<float> v(1, 1.0f);
       if (odd)
         comm.allreduce(chorus::Tensor(v.data(), {1}))->wait();
       else
         comm.barrier()->wait();
     }},
};

// Each case on a fresh communicator (a failed one stays failed): split of the world.
int mismatch() {
  auto world = chorus::DistContext::get().communicator();
  const int r = world->rank();
  for (const MismatchCase& c : kMismatchCases) {
    auto comm = world->split(0, r);
    std::string got = "no error";
    try {
      c.call(*comm, r == 0);
    } catch (const chorus::MismatchError& error) {
      const auto& ranks = error.ranks();
      // The rank that found the mismatch and the one it disagrees with; rank 0 is in every pair.
      const bool namesTwo =
          c.ownPair ? ranks == std::vector<int>{0, 0}
                    : ranks.size() == 2 && ranks[0] != ranks[1] && (ranks[0] == 0 || ranks[1] == 0);
      got = error.field() == c.field && namesTwo ? "" : std::string(error.what());
    } catch (const std::exception& error) {
      got = std::string("not a MismatchError: ") + error.what();
    }
    if (!got.empty())
      std::printf("rank %d: mismatched %s: %s\n", r, c.field, got.c_str());
    check(got.empty(), c.field, r);
  }
  int64_t failed = failures;
  world->allreduce(chorus::Tensor(&failed, {1}))->wait();
  if (r == 0 && failed == 0)
    std::printf("mpi_check: OK (mismatch on %d ranks, backend %s)\n", world->size(),
                world->backendName().c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--serialized")
    return serialized();
  if (mode == "--timeout")
    return timeout();
  if (mode == "--mismatch")
    return mismatch();
  const bool ownMpi = mode == "--own-mpi";
  int provided = 0;
  if (ownMpi)
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  try {
    auto& context = chorus::DistContext::get();
    auto world = context.communicator();
    const int p = world->size();
    const int r = world->rank();
    check(context.config().rank == r && context.config().size == p, "config", r);
    if (ownMpi)
      checkOwnTraffic(r, p);
    checkFallbacks(*world);
    checkPointToPoint(*world);
    checkGroups(*world);
    if (ownMpi)
      checkOwnTraffic(r, p);
    int64_t failed = failures;
    world->allreduce(chorus::Tensor(&failed, {1}))->wait();
    if (ownMpi) {
      int finalized = 1;
      MPI_Finalized(&finalized);
      check(!finalized, "MPI still initialized after chorus", r);
      // The program finalizes MPI itself, with chorus's communicators still alive: chorus must
      // drop them without MPI calls when the context is destroyed at exit.
      MPI_Finalize();
    }
    if (r == 0 && failed == 0 && failures == 0)
      std::printf("mpi_check: OK on %d ranks%s (backend %s)\n", p,
                  ownMpi ? " (program-owned MPI)" : "", world->backendName().c_str());
    return failed == 0 && failures == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mpi_check failed: %s\n", error.what());
    return 1;
  }
}
