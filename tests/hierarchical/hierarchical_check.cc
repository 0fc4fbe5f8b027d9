// hierarchical_check: the hierarchical backend on real ranks spread over simulated nodes.
//
//   two_nodes.py chorusrun CHORUSRUN hierarchical_check  (2 launchers x 2 ranks: {0,1} {2,3})
//   two_nodes.py ranks 2,1 hierarchical_check            (3 ranks: nodes {0,1} {2})
//   mpirun -np 2 -x CHORUS_NODE_RANK=0 -x CHORUS_IFNAME=lo hierarchical_check --mpirun
//          : -np 2 -x CHORUS_NODE_RANK=1 -x CHORUS_IFNAME=lo hierarchical_check --mpirun
//     (the same under mpirun: the leaders then talk MPI, and groups of one rank per node get
//      backend "mpi", not "tcp")
//
// Checks, with expected values from closed forms (element i of rank r is f(r, i), reduced here in
// double from f, never by chorus):
//  - the world's backend is "hierarchical" ("auto" chose it);
//  - allreduce for counts 0, 1, 7, 1000, 9000 (over the 32 KiB small-message limit) and 1 Mi
//    elements, dtypes float32, float64, int32, bfloat16, ops sum, max, avg;
//  - rank_list groups get the backend their nodes call for, and reduce correctly;
//  - allgather, broadcast (root on the last node), reduce_scatter, barrier, send/recv;
//  - mismatches, each on a fresh split of the world (a mismatch fails its communicator): one rank
//    of the last node with another count; the whole last node with another count (only the
//    leaders can see it); on 4 ranks also a different collective on one rank of the last node.
//    Every rank must raise MismatchError well before the deadline (CHORUS_TIMEOUT).
// Every rank counts its failures; rank 0 prints "hierarchical_check: PASSED on N ranks" only when
// the world-wide count is zero. Exit status 0 = passed.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace {

using chorus::Communicator;
using chorus::DataType;
using chorus::DistContext;
using chorus::ReduceOp;
using chorus::Tensor;

int failures = 0;
std::string onePerNode = "tcp";  // the backend of groups with one rank per node (mpi: --mpirun)
int worldRank = 0;
int worldSize = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL rank %d: %s\n", worldRank, what.c_str());
  }
}

// Small integers: exact in every dtype checked, and their sums (at most 4 * 13) too, even in
// bfloat16; avg of four is a multiple of 1/4, exact as well (of three, see roundingOf).
double f(int rank, size_t i) { return static_cast<double>((i * 5 + rank * 3) % 11 + rank); }

void put(DataType dtype, std::vector<std::byte>& buffer, size_t i, double value) {
  std::byte* at = buffer.data() + i * chorus::dataTypeSize(dtype);
  if (dtype == DataType::kFloat32) {
    const float v = static_cast<float>(value);
    std::memcpy(at, &v, sizeof v);
  } else if (dtype == DataType::kFloat64) {
    std::memcpy(at, &value, sizeof value);
  } else if (dtype == DataType::kInt32) {
    const int32_t v = static_cast<int32_t>(value);
    std::memcpy(at, &v, sizeof v);
  } else {  // bfloat16: the top half of the float32 (exact for these values)
    const float v = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    const uint16_t top = static_cast<uint16_t>(bits >> 16);
    std::memcpy(at, &top, sizeof top);
  }
}

double get(DataType dtype, const std::vector<std::byte>& buffer, size_t i) {
  const std::byte* at = buffer.data() + i * chorus::dataTypeSize(dtype);
  if (dtype == DataType::kFloat32) {
    float v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  if (dtype == DataType::kFloat64) {
    double v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  if (dtype == DataType::kInt32) {
    int32_t v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  uint16_t top;
  std::memcpy(&top, at, sizeof top);
  const uint32_t bits = static_cast<uint32_t>(top) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// The reduction of f(r, i) over `members`, as chorus documents it (avg of integers truncates).
double expected(ReduceOp op, DataType dtype, const std::vector<int>& members, size_t i) {
  double sum = 0;
  double max = -1e300;
  for (int r : members) {
    sum += f(r, i);
    max = std::max(max, f(r, i));
  }
  if (op == ReduceOp::kMax)
    return max;
  if (op == ReduceOp::kSum)
    return sum;
  const double avg = sum / static_cast<double>(members.size());
  return dtype == DataType::kInt32 ? std::trunc(avg) : avg;
}

// The relative error allowed: sums and maxima of f are exact; an average over a size that is not a
// power of two rounds once to the dtype.
double roundingOf(ReduceOp op, DataType dtype) {
  if (op != ReduceOp::kAvg || dtype == DataType::kInt32)
    return 0;
  if (dtype == DataType::kBFloat16)
    return 1.0 / 256;
  return dtype == DataType::kFloat32 ? 1e-7 : 1e-15;
}

// One allreduce of f over `comm` (whose members, in rank order, are the world ranks `members`).
void checkAllreduce(Communicator& comm,
                    const std::vector<int>& members,
                    DataType dtype,
                    ReduceOp op,
                    size_t count) {
  std::vector<std::byte> buffer(count * chorus::dataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) put(dtype, buffer, i, f(worldRank, i));
  comm.allreduce(Tensor(buffer.data(), dtype, {static_cast<int64_t>(count)}), op)->wait();
  const double tolerance = roundingOf(op, dtype);
  size_t wrong = 0;
  size_t firstWrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want = expected(op, dtype, members, i);
    if (std::abs(get(dtype, buffer, i) - want) > tolerance * want && wrong++ == 0)
      firstWrong = i;
  }
  check(wrong == 0, "allreduce " + std::string(chorus::toString(dtype)) + " " +
                        std::string(chorus::toString(op)) + " x " + std::to_string(count) + ": " +
                        std::to_string(wrong) + " wrong, first at " + std::to_string(firstWrong));
}

std::vector<int> everyRank() {
  std::vector<int> members(worldSize);
  for (int r = 0; r < worldSize; ++r) members[r] = r;
  return members;
}

void checkAllreduceGrid(Communicator& world) {
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      for (size_t count : {0, 1, 7, 1000, 9000, 1 << 20})
        checkAllreduce(world, everyRank(), dtype, op, count);
    }
  }
  std::printf("allreduce grid rank %d: checked\n", worldRank);
}

// A group and the backend its layout calls for (nodes: ranks 0, 1 on node 0, the rest on node 1).
void checkGroup(const chorus::RankList& rankList,
                const std::vector<int>& myGroup,
                const std::string& backend) {
  auto comm = DistContext::get().communicator(rankList);
  check(comm->backendName() == backend, "group of world rank " + std::to_string(worldRank) +
                                            ": backend " + comm->backendName() + ", expected " +
                                            backend);
  checkAllreduce(*comm, myGroup, DataType::kFloat32, ReduceOp::kSum, 9000);
  checkAllreduce(*comm, myGroup, DataType::kInt32, ReduceOp::kMax, 7);
}

void checkGroups() {
  if (worldSize == 4) {
    // {0, 2, 3}: node 0 has one member, node 1 two; {1, 3}: one per node; {0, 1}: one node.
    if (worldRank == 1)
      checkGroup({{0, 2, 3}, {1}}, {1}, "void");
    else
      checkGroup({{0, 2, 3}, {1}}, {0, 2, 3}, "hierarchical");
    const bool odd = worldRank % 2 == 1;
    checkGroup({{1, 3}, {0, 2}}, odd ? std::vector<int>{1, 3} : std::vector<int>{0, 2}, onePerNode);
    checkGroup({{0, 1}, {2, 3}}, worldRank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3},
               "shm");
  } else {
    checkGroup({{1, 2}, {0}}, worldRank == 0 ? std::vector<int>{0} : std::vector<int>{1, 2},
               worldRank == 0 ? "void" : onePerNode);
  }
  std::printf("groups rank %d: checked\n", worldRank);
}

// allgather: rank r contributes {10r, 10r + 1}; broadcast from the last rank; reduce_scatter:
// element j of rank r is r + j; send/recv: rank 0 sends to the last rank.
void checkOtherCollectives(Communicator& world) {
  const int n = worldSize;
  std::vector<int64_t> in = {10 * worldRank, 10 * worldRank + 1};
  std::vector<int64_t> gathered(2 * n, -1);
  world.allgather(Tensor(in.data(), {2}), Tensor(gathered.data(), {2 * n}))->wait();
  for (int r = 0; r < n; ++r)
    check(gathered[2 * r] == 10 * r && gathered[2 * r + 1] == 10 * r + 1, "allgather");

  std::vector<double> value(3000, worldRank == n - 1 ? 42.5 : -1.0);
  world.broadcast(Tensor(value.data(), {3000}), n - 1)->wait();
  check(value == std::vector<double>(3000, 42.5), "broadcast from the last rank");

  std::vector<float> x(4 * n);
  for (int j = 0; j < 4 * n; ++j) x[j] = static_cast<float>(worldRank + j);
  std::vector<float> chunk(4, -1);
  world.reduceScatter(Tensor(x.data(), {4 * n}), Tensor(chunk.data(), {4}))->wait();
  const float rankSum = static_cast<float>(n * (n - 1) / 2);
  for (int k = 0; k < 4; ++k)
    check(chunk[k] == rankSum + n * static_cast<float>(4 * worldRank + k), "reduce_scatter");

  world.barrier()->wait();
  std::vector<int32_t> message = {worldRank == 0 ? 1234 : 0};
  if (worldRank == 0)
    world.send(Tensor(message.data(), {1}), n - 1, 5)->wait();
  if (worldRank == n - 1) {
    world.recv(Tensor(message.data(), {1}), 0, 5)->wait();
    check(message[0] == 1234, "send/recv");
  }
  std::printf("other collectives rank %d: checked\n", worldRank);
}

// Runs `call` on a fresh split of the world and expects MismatchError on this rank, promptly.
template <typename Call>
void expectMismatch(Communicator& world, const std::string& what, Call call) {
  auto comm = world.split(0, worldRank);
  check(comm->backendName() == "hierarchical", what + ": split backend " + comm->backendName());
  const auto start = std::chrono::steady_clock::now();
  std::string outcome = "no error";
  try {
    call(*comm);
  } catch (const chorus::MismatchError& e) {
    outcome = "MismatchError";
    std::printf("mismatch (%s) rank %d: %s\n", what.c_str(), worldRank, e.what());
  } catch (const chorus::Error& e) {
    outcome = std::string("another error: ") + e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  check(outcome == "MismatchError", what + ": expected MismatchError, got " + outcome);
  check(seconds < 10, what + ": took " + std::to_string(seconds) + " s");
}

void checkMismatches(Communicator& world) {
  const int last = worldSize - 1;
  auto allreduceOf = [](Communicator& comm, int count) {
    std::vector<float> data(count, 1.0f);
    comm.allreduce(Tensor(data.data(), {count}))->wait();
  };
  expectMismatch(world, "count on the last rank",
                 [&](Communicator& comm) { allreduceOf(comm, worldRank == last ? 5 : 4); });
  expectMismatch(world, "count on the last node",
                 [&](Communicator& comm) { allreduceOf(comm, worldRank >= 2 ? 20000 : 4); });
  if (worldSize == 4) {
    expectMismatch(world, "allgather on the last rank", [&](Communicator& comm) {
      if (worldRank != last) {
        allreduceOf(comm, 4);
        return;
      }
      std::vector<float> in(4, 1.0f), out(16);
      comm.allgather(Tensor(in.data(), {4}), Tensor(out.data(), {16}))->wait();
    });
  }
  std::printf("mismatches rank %d: checked\n", worldRank);
}

int run() {
  auto world = DistContext::get().communicator();
  worldRank = world->rank();
  worldSize = world->size();
  if (worldSize != 3 && worldSize != 4) {
    std::printf("FAIL rank %d: hierarchical_check needs 3 or 4 ranks, got %d\n", worldRank,
                worldSize);
    return 2;
  }
  check(world->backendName() == "hierarchical", "world backend " + world->backendName());
  check(world->localSize() == (worldRank < 2 ? 2 : worldSize - 2), "local size");
  checkAllreduceGrid(*world);
  checkGroups();
  checkOtherCollectives(*world);
  checkMismatches(*world);
  std::vector<int32_t> total = {failures};
  world->allreduce(Tensor(total.data(), {1}))->wait();
  if (worldRank == 0 && total[0] == 0)
    std::printf("hierarchical_check: PASSED on %d ranks\n", worldSize);
  std::fflush(stdout);
  return total[0] == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--mpirun") == 0)
    onePerNode = "mpi";
  try {
    return run();
  } catch (const chorus::Error& e) {
    std::printf("FAIL rank %d: %s\n", worldRank, e.what());
    std::fflush(stdout);
    return 1;
  }
}
