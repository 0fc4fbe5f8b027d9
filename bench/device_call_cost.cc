// chorus-device-call-cost: where the per-call overhead of a CUDA allreduce goes (issue 18's target:
// at most 2 us over raw NCCL at 8 B on one rank; the first GPU runs measured about 3.4 us). It
// times loops of ITERS calls of 8-byte allreduces, building up from raw NCCL to chorus one step at
// a time, each row adding to the one above:
//
//   raw              ncclAllReduce on a stream of its own (a blocking communicator, torch's kind)
//   +nonblocking     on a non-blocking communicator (chorus's kind), asking
//                    ncclCommGetAsyncError until the launch is done, as chorus's enqueue does
//   +start           an event on the caller's stream, and the NCCL stream waits for it
//                    (how chorus orders a collective after its producer)
//   +end             an event recorded after the collective (chorus's completion)
//   +caller waits    the caller's stream waits for that event (Work::wait)
//   chorus           Communicator::allreduce on a CUDA tensor; its Work is dropped
//   chorus+wait      the same, and wait() on each Work
//
// and two rows beside them: "caller stream" runs the non-blocking call on the caller's stream
// itself and records the end event there (no start event and no cross-stream wait; what torch
// does for a call without async_op since 2.7), and "chorus blocking" is chorus doing that, for a
// call under BlockingCalls (Note [Blocking calls on the caller's stream]), with wait().
//
// Each loop is timed on the host twice: up to the last enqueue ("enqueue", the caller's cost per
// call), and up to the end of a device synchronize after it ("done", which includes the GPU's own
// time). Median of ROUNDS loops, in microseconds per call. With more than one rank, every rank
// runs the same loops (rank 0 prints); ranks that share a GPU each become an NCCL host of their own
// over loopback (NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo), where a call's GPU time is milliseconds: use
// few ITERS there. Needs a GPU and a chorus built with NCCL; without a GPU it says so and exits 0.
//
//   chorusrun -np 1 build/bin/chorus-device-call-cost [ITERS=2000] [ROUNDS=15]
//   chorusrun -np 2 build/bin/chorus-device-call-cost 50 5
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/nccl/nccl_status.h"
#include "chorus/chorus.h"

namespace {

using chorus::backend::nccl::checkCuda;
using chorus::backend::nccl::checkNccl;

struct Times {
  double enqueue;  // us per call, to the last enqueue
  double done;     // us per call, to the end of the device synchronize
};

Times timeLoop(int iterations, int rounds, const std::function<void()>& call) {
  std::vector<double> enqueue, done;
  for (int round = 0; round < rounds; ++round) {
    checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", 0);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) call();
    const auto enqueued = std::chrono::steady_clock::now();
    checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", 0);
    const auto end = std::chrono::steady_clock::now();
    enqueue.push_back(std::chrono::duration<double, std::micro>(enqueued - start).count() /
                      iterations);
    done.push_back(std::chrono::duration<double, std::micro>(end - start).count() / iterations);
  }
  std::sort(enqueue.begin(), enqueue.end());
  std::sort(done.begin(), done.end());
  return {enqueue[enqueue.size() / 2], done[done.size() / 2]};
}

// An NCCL communicator over every rank of `comm`: rank 0 makes the id, chorus broadcasts it.
ncclComm_t makeRawCommunicator(chorus::Communicator& comm, bool blocking) {
  ncclUniqueId id;
  if (comm.rank() == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
  comm.broadcast(chorus::Tensor(&id, chorus::DataType::kUInt8, {int64_t{sizeof(id)}}), 0)->wait();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t made = nullptr;
  ncclResult_t state = ncclCommInitRankConfig(&made, comm.size(), id, comm.rank(), &config);
  while (state == ncclInProgress) checkNccl(ncclCommGetAsyncError(made, &state), "poll", 0);
  checkNccl(state, "ncclCommInitRankConfig", comm.rank());
  return made;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  auto comm = chorus::DistContext::get().communicator();
  const int rank = comm->rank();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("chorus-device-call-cost: SKIPPED (this process sees no CUDA GPU)\n");
    return 0;
  }
  if (devices < comm->localSize()) {  // ranks sharing a GPU: NCCL's loopback mode
    setenv("NCCL_HOSTID", ("chorus-call-cost-" + std::to_string(comm->localRank())).c_str(), 0);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  const int device = comm->localRank() % devices;
  checkCuda(cudaSetDevice(device), "cudaSetDevice", rank);
  float* data = nullptr;
  checkCuda(cudaMalloc(&data, 2 * sizeof(float)), "cudaMalloc", rank);
  ncclComm_t raw = makeRawCommunicator(*comm, /*blocking=*/true);
  ncclComm_t nonblocking = makeRawCommunicator(*comm, /*blocking=*/false);
  cudaStream_t stream = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate", rank);
  cudaEvent_t start = nullptr, end = nullptr;
  checkCuda(cudaEventCreateWithFlags(&start, cudaEventDisableTiming), "cudaEventCreate", rank);
  checkCuda(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreate", rank);
  cudaStream_t caller = nullptr;  // the legacy default stream, chorus's current one here

  auto nccl = [&] {
    checkNccl(ncclAllReduce(data, data, 2, ncclFloat32, ncclSum, raw, stream), "ncclAllReduce", 0);
  };
  auto ncclNonblockingOn = [&](cudaStream_t on) {
    ncclResult_t result = ncclAllReduce(data, data, 2, ncclFloat32, ncclSum, nonblocking, on);
    while (result == ncclInProgress) ncclCommGetAsyncError(nonblocking, &result);
    checkNccl(result, "ncclAllReduce", rank);
  };
  auto ncclNonblocking = [&] { ncclNonblockingOn(stream); };
  auto withStart = [&] {
    checkCuda(cudaEventRecord(start, caller), "cudaEventRecord", rank);
    checkCuda(cudaStreamWaitEvent(stream, start, 0), "cudaStreamWaitEvent", rank);
    ncclNonblocking();
  };
  auto withEnd = [&] {
    withStart();
    checkCuda(cudaEventRecord(end, stream), "cudaEventRecord", rank);
  };
  auto callerWaits = [&] {
    withEnd();
    checkCuda(cudaStreamWaitEvent(caller, end, 0), "cudaStreamWaitEvent", rank);
  };
  auto onCallerStream = [&] {
    ncclNonblockingOn(caller);
    checkCuda(cudaEventRecord(end, caller), "cudaEventRecord", rank);
  };
  const chorus::Tensor tensor(data, chorus::DataType::kFloat32, {2}, chorus::Device::cuda(device));
  auto viaChorus = [&] { comm->allreduce(tensor, chorus::ReduceOp::kSum); };
  auto viaChorusWait = [&] { comm->allreduce(tensor, chorus::ReduceOp::kSum)->wait(); };
  auto viaChorusBlocking = [&] {  // as chorus's Python makes a blocking call: on this stream
    chorus::BlockingCalls blocking;
    comm->allreduce(tensor, chorus::ReduceOp::kSum)->wait();
  };
  viaChorusWait();  // chorus's NCCL communicator and watchdog start outside the timing
  nccl();           // and each raw communicator's first call (its connections)
  ncclNonblocking();

  struct Row {
    const char* name;
    std::function<void()> call;
  };
  const std::vector<Row> rows = {{"raw", nccl},
                                 {"+nonblocking", ncclNonblocking},
                                 {"+start", withStart},
                                 {"+end", withEnd},
                                 {"+caller waits", callerWaits},
                                 {"chorus", viaChorus},
                                 {"chorus+wait", viaChorusWait},
                                 {"caller stream", onCallerStream},
                                 {"chorus blocking", viaChorusBlocking}};
  if (rank == 0) {
    std::printf(
        "# 8-byte allreduce on %d rank(s), %d calls per loop, median of %d loops (us per "
        "call)\n",
        comm->size(), iterations, rounds);
    std::printf("# %-14s %10s %10s\n", "variant", "enqueue", "done");
  }
  for (const Row& row : rows) {
    const Times times = timeLoop(iterations, rounds, row.call);
    if (rank == 0)
      std::printf("  %-14s %10.2f %10.2f\n", row.name, times.enqueue, times.done);
    std::fflush(stdout);
  }
  cudaDeviceSynchronize();
  ncclCommDestroy(raw);
  ncclCommDestroy(nonblocking);
  cudaFree(data);
  return 0;
}
