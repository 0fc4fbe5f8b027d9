// chorus-device-call-cost: where the per-call overhead of a CUDA allreduce goes (issue 18's target:
// at most 2 us over raw NCCL at 8 B; the first GPU run measured about 3 us). On one rank and one
// GPU, it times loops of ITERS calls of 8-byte allreduces, building up from raw NCCL to chorus one
// step at a time:
//
//   raw              ncclAllReduce on a stream of its own (a blocking communicator)
//   +nonblocking     the same on a non-blocking communicator (chorus's kind), asking
//                    ncclCommGetAsyncError after each call, as chorus's enqueue does
//   +start           an event on the caller's stream, and the NCCL stream waits for it
//                    (how chorus orders a collective after its producer)
//   +end             an event recorded after the collective (chorus's completion)
//   +caller waits    the caller's stream waits for that event (Work::wait)
//   chorus           Communicator::allreduce on a CUDA tensor; its Work is dropped
//   chorus+wait      the same, and wait() on each Work
//
// Each loop is timed on the host twice: up to the last enqueue ("enqueue", the caller's cost per
// call), and up to the end of a device synchronize after it ("done", which includes the GPU's own
// time). Median of 15 rounds, in microseconds per call. Needs a GPU and a chorus built with NCCL.
//
//   chorusrun -np 1 build/bin/chorus-device-call-cost [ITERS=2000]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
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

Times timeLoop(int iterations, const std::function<void()>& call) {
  std::vector<double> enqueue, done;
  for (int round = 0; round < 15; ++round) {
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

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  auto comm = chorus::DistContext::get().communicator();
  if (comm->size() != 1) {
    std::fprintf(stderr, "chorus-device-call-cost: run it on one rank (chorusrun -np 1)\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("chorus-device-call-cost: SKIPPED (this process sees no CUDA GPU)\n");
    return 0;
  }
  checkCuda(cudaSetDevice(0), "cudaSetDevice", 0);
  float* data = nullptr;
  checkCuda(cudaMalloc(&data, 2 * sizeof(float)), "cudaMalloc", 0);
  ncclUniqueId id;
  checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
  ncclComm_t raw = nullptr;
  checkNccl(ncclCommInitRank(&raw, 1, id, 0), "ncclCommInitRank", 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nonblocking = nullptr;
  checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);  // an id serves one communicator
  ncclResult_t state = ncclCommInitRankConfig(&nonblocking, 1, id, 0, &config);
  while (state == ncclInProgress) checkNccl(ncclCommGetAsyncError(nonblocking, &state), "poll", 0);
  checkNccl(state, "ncclCommInitRankConfig", 0);
  cudaStream_t stream = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate", 0);
  cudaEvent_t start = nullptr, end = nullptr;
  checkCuda(cudaEventCreateWithFlags(&start, cudaEventDisableTiming), "cudaEventCreate", 0);
  checkCuda(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreate", 0);
  cudaStream_t caller = nullptr;  // the legacy default stream, chorus's current one here

  auto nccl = [&] {
    checkNccl(ncclAllReduce(data, data, 2, ncclFloat32, ncclSum, raw, stream), "ncclAllReduce", 0);
  };
  auto ncclNonblocking = [&] {
    ncclResult_t result = ncclAllReduce(data, data, 2, ncclFloat32, ncclSum, nonblocking, stream);
    while (result == ncclInProgress) ncclCommGetAsyncError(nonblocking, &result);
    checkNccl(result, "ncclAllReduce", 0);
    checkNccl(ncclCommGetAsyncError(nonblocking, &result), "ncclCommGetAsyncError", 0);
    checkNccl(result, "ncclAllReduce (asynchronous)", 0);
  };
  auto withStart = [&] {
    checkCuda(cudaEventRecord(start, caller), "cudaEventRecord", 0);
    checkCuda(cudaStreamWaitEvent(stream, start, 0), "cudaStreamWaitEvent", 0);
    nccl();
  };
  auto withEnd = [&] {
    withStart();
    checkCuda(cudaEventRecord(end, stream), "cudaEventRecord", 0);
  };
  auto callerWaits = [&] {
    withEnd();
    checkCuda(cudaStreamWaitEvent(caller, end, 0), "cudaStreamWaitEvent", 0);
  };
  const chorus::Tensor tensor(data, chorus::DataType::kFloat32, {2}, chorus::Device::cuda(0));
  auto viaChorus = [&] { comm->allreduce(tensor, chorus::ReduceOp::kSum); };
  auto viaChorusWait = [&] { comm->allreduce(tensor, chorus::ReduceOp::kSum)->wait(); };
  viaChorusWait();  // chorus's NCCL communicator and watchdog start outside the timing

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
                                 {"chorus+wait", viaChorusWait}};
  std::printf("# 8-byte allreduce on 1 rank, %d calls per loop, median of 15 loops (us per call)\n",
              iterations);
  std::printf("# %-14s %10s %10s\n", "variant", "enqueue", "done");
  for (const Row& row : rows) {
    const Times times = timeLoop(iterations, row.call);
    std::printf("  %-14s %10.2f %10.2f\n", row.name, times.enqueue, times.done);
  }
  cudaDeviceSynchronize();
  ncclCommDestroy(raw);
  ncclCommDestroy(nonblocking);
  cudaFree(data);
  return 0;
}
