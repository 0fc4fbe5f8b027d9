// A real multi-process check, run through chorusrun by ctest (see CMakeLists.txt): the world
// communicator comes from the launcher's environment via DistContext, and every collective is
// checked against closed forms. Prints "collectives_check: OK" on rank 0 and exits 0 on success.
#include <cstdio>
#include <numeric>
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

}  // namespace

int main() {
  using chorus::Tensor;
  try {
    auto& context = chorus::DistContext::get();
    auto comm = context.communicator();
    const int p = comm->size();
    const int r = comm->rank();
    check(context.config().rank == r && context.config().size == p, "config", r);

    for (int64_t count : {0, 1, 7, 100003}) {
      std::vector<double> values(count);
      for (int64_t i = 0; i < count; ++i) values[i] = r + 1 + i % 3;
      comm->allreduce(Tensor(values.data(), {count}))->wait();
      bool ok = true;
      for (int64_t i = 0; i < count; ++i) ok = ok && values[i] == p * (p + 1) / 2.0 + p * (i % 3);
      check(ok, "allreduce", r);
    }
    std::vector<int32_t> mine = {r}, all(p);
    comm->allgather(Tensor(mine.data(), {1}), Tensor(all.data(), {p}))->wait();
    std::vector<int32_t> ranks(p);
    std::iota(ranks.begin(), ranks.end(), 0);
    check(all == ranks, "allgather", r);
    for (int64_t count : {int64_t{2}, int64_t{200003}}) {  // in place: input is block r of output
      std::vector<int64_t> blocks(count * p, -1);
      for (int64_t i = 0; i < count; ++i) blocks[r * count + i] = 1000000 * r + i;
      comm->allgather(Tensor(blocks.data() + r * count, {count}),
                      Tensor(blocks.data(), {count * p}))
          ->wait();
      bool inPlace = true;
      for (int64_t k = 0; k < count * p; ++k)
        inPlace = inPlace && blocks[k] == 1000000 * (k / count) + k % count;
      check(inPlace, "allgather in place", r);
    }

    std::vector<float> data(33, r == p - 1 ? 5.0f : 0.0f);
    comm->broadcast(Tensor(data.data(), {33}), p - 1)->wait();
    check(data == std::vector<float>(33, 5.0f), "broadcast", r);

    std::vector<int64_t> input(2 * p, r), output(2);
    comm->reduceScatter(Tensor(input.data(), {2 * p}), Tensor(output.data(), {2}))->wait();
    check(output == std::vector<int64_t>(2, p * (p - 1) / 2), "reduce_scatter", r);

    std::vector<int32_t> sendBlocks(p), receiveBlocks(p);
    for (int j = 0; j < p; ++j) sendBlocks[j] = r * 100 + j;
    comm->allToAll(Tensor(sendBlocks.data(), {p}), Tensor(receiveBlocks.data(), {p}))->wait();
    bool ok = true;
    for (int j = 0; j < p; ++j) ok = ok && receiveBlocks[j] == j * 100 + r;
    check(ok, "all_to_all", r);

    // all_to_all_v: rank q sends rank j (q + j) % 3 rows of 700 int32 (past the shm small slot
    // for some pairs, none for others), element i of row k being q * 1000000 + j * 10000 + k * 700
    // + i.
    auto rowsBetween = [](int q, int j) { return int64_t{(q + j) % 3}; };
    auto value = [](int q, int j, int64_t k, int64_t i) {
      return static_cast<int32_t>(q * 1000000 + j * 10000 + k * 700 + i);
    };
    std::vector<int64_t> sendSplits, recvSplits;
    std::vector<int32_t> sendRows, receiveRows;
    for (int j = 0; j < p; ++j) {
      sendSplits.push_back(rowsBetween(r, j));
      recvSplits.push_back(rowsBetween(j, r));
      for (int64_t k = 0; k < sendSplits.back(); ++k) {
        for (int64_t i = 0; i < 700; ++i) sendRows.push_back(value(r, j, k, i));
      }
    }
    const int64_t receivedRows = std::accumulate(recvSplits.begin(), recvSplits.end(), int64_t{0});
    receiveRows.assign(static_cast<size_t>(receivedRows * 700), -1);
    comm->allToAllV(Tensor(sendRows.data(), {static_cast<int64_t>(sendRows.size()) / 700, 700}),
                    sendSplits, Tensor(receiveRows.data(), {receivedRows, 700}), recvSplits)
        ->wait();
    ok = true;
    size_t at = 0;
    for (int j = 0; j < p; ++j) {
      for (int64_t k = 0; k < recvSplits[j]; ++k) {
        for (int64_t i = 0; i < 700; ++i) ok = ok && receiveRows[at++] == value(j, r, k, i);
      }
    }
    check(ok, "all_to_all_v", r);

    // allgather_v: rank q contributes rowsBetween(q, 0) rows (rank 0 none), the same values.
    std::vector<int32_t> myRows, gatheredRows;
    std::vector<int64_t> gatherSplits;
    for (int64_t k = 0; k < rowsBetween(r, 0); ++k) {
      for (int64_t i = 0; i < 700; ++i) myRows.push_back(value(r, 0, k, i));
    }
    for (int q = 0; q < p; ++q) gatherSplits.push_back(rowsBetween(q, 0));
    const int64_t gatheredCount =
        std::accumulate(gatherSplits.begin(), gatherSplits.end(), int64_t{0});
    gatheredRows.assign(static_cast<size_t>(gatheredCount * 700), -1);
    comm->allgatherV(Tensor(myRows.data(), {static_cast<int64_t>(myRows.size()) / 700, 700}),
                     Tensor(gatheredRows.data(), {gatheredCount, 700}), gatherSplits)
        ->wait();
    ok = true;
    at = 0;
    for (int q = 0; q < p; ++q) {
      for (int64_t k = 0; k < gatherSplits[q]; ++k) {
        for (int64_t i = 0; i < 700; ++i) ok = ok && gatheredRows[at++] == value(q, 0, k, i);
      }
    }
    check(ok, "allgather_v", r);

    std::vector<int64_t> reduced(5, r + 1);
    comm->reduce(Tensor(reduced.data(), {5}), p / 2)->wait();
    check(reduced == std::vector<int64_t>(5, r == p / 2 ? p * (p + 1) / 2 : r + 1), "reduce", r);

    std::vector<int32_t> gathered(r == 0 ? p : 0);
    comm->gather(Tensor(mine.data(), {1}), Tensor(gathered.data(), {r == 0 ? p : 0}), 0)->wait();
    check(r != 0 || gathered == ranks, "gather", r);

    std::vector<int32_t> scattered(1, -1);
    comm->scatter(Tensor(ranks.data(), {p}), Tensor(scattered.data(), {1}), p - 1)->wait();
    check(scattered[0] == r, "scatter", r);

    // Groups from a rank_list: [[0 .. h-1], [h .. p-1]] (a single group when p == 1), served by
    // the pool: asking again returns the same communicator.
    const int h = (p + 1) / 2;
    chorus::RankList halves(1);
    for (int q = 0; q < p; ++q) {
      if (q == h)
        halves.emplace_back();
      halves.back().push_back(q);
    }
    auto group = context.communicator(halves);
    check(group == context.communicator(halves), "pool caching", r);
    const bool first = r < h;
    check(group->size() == (first ? h : p - h) && group->rank() == (first ? r : r - h) &&
              group->groupId() == (first ? 0 : 1) && group->groupSize() == (p > 1 ? 2 : 1) &&
              group->worldRank() == r && group->rootRank() == (first ? 0 : h),
          "group attributes", r);
    std::vector<int64_t> groupSum = {r};
    group->allreduce(Tensor(groupSum.data(), {1}))->wait();
    const int64_t lo = first ? 0 : h, hi = first ? h : p;  // sum of lo .. hi-1
    check(groupSum[0] == (hi * (hi - 1) - lo * (lo - 1)) / 2, "group allreduce", r);

    // Receives from any source: rank 0 takes one message from every other rank, in whatever order
    // they come; each Work's sourceRank() names the sender, whose message carries its rank.
    if (p > 1 && r != 0) {
      std::vector<int32_t> note = {1000 + r};
      comm->send(Tensor(note.data(), {1}), 0, 21)->wait();
    } else if (p > 1) {
      std::vector<bool> heard(p, false);
      bool fromEveryone = true;
      for (int k = 1; k < p; ++k) {
        std::vector<int32_t> got = {-1};
        auto work = comm->recv(Tensor(got.data(), {1}), chorus::Communicator::kAnySource, 21);
        work->wait();
        const int sender = work->sourceRank();
        const bool known = sender > 0 && sender < p && !heard[sender];
        fromEveryone = fromEveryone && known && got[0] == 1000 + sender;
        if (known)
          heard[sender] = true;
      }
      check(fromEveryone, "recv from any source", r);
    }
    // As in MPI, a message goes to the earliest issued recv that can take it: rank 1 sends 11 then
    // 22; rank 0's recv from any source, issued first, gets 11, and its recv from rank 1 gets 22.
    if (p > 1 && r == 1) {
      for (int64_t value : {11, 22}) {
        std::vector<int64_t> note = {value};
        comm->send(Tensor(note.data(), {1}), 0, 22)->wait();
      }
    } else if (p > 1 && r == 0) {
      std::vector<int64_t> fromAny = {0}, fromOne = {0};
      auto any = comm->recv(Tensor(fromAny.data(), {1}), chorus::Communicator::kAnySource, 22);
      auto one = comm->recv(Tensor(fromOne.data(), {1}), 1, 22);
      any->wait();
      one->wait();
      check(fromAny[0] == 11 && fromOne[0] == 22 && any->sourceRank() == 1,
            "the earliest recv takes the message", r);
    }

    comm->barrier()->wait();

    // A context made after shutdown() builds a fresh world that works like the first.
    comm.reset();
    group.reset();
    context.shutdown();
    auto again = chorus::DistContext::get().communicator();
    std::vector<int32_t> one = {1};
    again->allreduce(Tensor(one.data(), {1}))->wait();
    check(one[0] == p, "allreduce after shutdown and a new context", r);
    if (r == 0)
      std::printf("collectives_check: %s on %d ranks\n", failures ? "FAILED" : "OK", p);
    return failures ? 1 : 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "collectives_check failed: %s\n", e.what());
    return 1;
  }
}
