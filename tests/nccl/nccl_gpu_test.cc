// The nccl backend on a GPU: every collective against closed forms, at 1, 2 and 3 ranks sharing
// one GPU (gpu_ranks.h), the stream order after a slow producer, and a rank that never calls.
// Each test skips on a machine without a GPU, saying why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "backend/device_backend.h"
#include "backend/nccl/nccl_setup.h"
#include "chorus/error.h"
#include "gpu_ranks.h"

namespace chorus::backend::nccl {
namespace {

using namespace std::chrono_literals;
using testing::DeviceArray;
using testing::forkGpuRanks;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

DeviceCallContext callOf(Collective collective) {
  DeviceCallContext call;
  call.fingerprint.collective = collective;
  call.deadline = Deadline::after(60s);
  return call;
}

// Waits on the host for everything the backend enqueued (the runtime's synchronize=True).
void finish(DeviceBackend& device) { device.recordEnd()->synchronize(Deadline::after(60s)); }

// Rank r holds (r + 1) * (i % 7 + 1): the sum over ranks is size (size + 1) / 2 * (i % 7 + 1).
float term(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 7 + 1)); }

TEST(NcclGpu, AllreduceSumsAndAveragesAtOneTwoAndThreeRanks) {
  CHORUS_SKIP_WITHOUT_GPU();
  for (int size : {1, 2, 3}) {
    forkGpuRanks(size, [](const BackendOptions& options) {
      auto backend = createNcclBackend(options);
      DeviceBackend& device = *backend->deviceBackend();
      const float ranksSum = options.size * (options.size + 1) / 2.0f;
      for (size_t count : {size_t{0}, size_t{1}, size_t{1027}, size_t{1} << 20}) {
        std::vector<float> mine(count);
        for (size_t i = 0; i < count; ++i) mine[i] = term(options.rank, i);
        DeviceArray<float> sum(mine), avg(mine);
        device.startAfter(0, false);
        device.allreduce(callOf(Collective::kAllreduce),
                         {sum.get(), sum.get(), count, DataType::kFloat32, ReduceOp::kSum});
        device.allreduce(callOf(Collective::kAllreduce),
                         {avg.get(), avg.get(), count, DataType::kFloat32, ReduceOp::kAvg});
        finish(device);
        const auto sums = sum.read(), avgs = avg.read();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(sums[i], ranksSum * (i % 7 + 1)) << "count " << count << " at " << i;
          ASSERT_FLOAT_EQ(avgs[i], ranksSum / options.size * (i % 7 + 1)) << "at " << i;
        }
      }
    });
  }
}

TEST(NcclGpu, EveryOtherCollectiveMatchesItsClosedFormOnThreeRanks) {
  CHORUS_SKIP_WITHOUT_GPU();
  forkGpuRanks(3, [](const BackendOptions& options) {
    auto backend = createNcclBackend(options);
    DeviceBackend& device = *backend->deviceBackend();
    const int r = options.rank, p = options.size;
    constexpr size_t n = 5;  // elements per rank
    // Element i of rank q's block: 100 q + i (int32, exact).
    auto block = [](int q, size_t i) { return static_cast<int32_t>(100 * q + i); };
    std::vector<int32_t> mine(n), all(n * p);
    for (size_t i = 0; i < n; ++i) mine[i] = block(r, i);
    for (int q = 0; q < p; ++q)
      for (size_t i = 0; i < n; ++i)
        all[q * n + i] = block(q, i) + r;  // rank r's full buffer, for reduce_scatter/all_to_all

    DeviceArray<int32_t> in(mine), gathered(n * p), full(all), scattered(n), swapped(n * p),
        rooted(n * p), bcast(mine), reduced(mine), redOut(n), fromRoot(n);
    device.startAfter(0, false);
    const size_t bytes = n * sizeof(int32_t);
    device.allgather(callOf(Collective::kAllgather), {in.get(), gathered.get(), bytes});
    device.reduceScatter(callOf(Collective::kReduceScatter),
                         {full.get(), scattered.get(), n, DataType::kInt32, ReduceOp::kSum});
    device.allToAll(callOf(Collective::kAllToAll), {full.get(), swapped.get(), bytes});
    device.gather(callOf(Collective::kGather), {in.get(), rooted.get(), bytes, 0});
    device.broadcast(callOf(Collective::kBroadcast), {bcast.get(), bcast.get(), bytes, 1});
    device.reduce(callOf(Collective::kReduce),
                  {reduced.get(), redOut.get(), n, DataType::kInt32, ReduceOp::kMax, 2});
    device.scatter(callOf(Collective::kScatter), {full.get(), fromRoot.get(), bytes, 1});
    device.barrier(callOf(Collective::kBarrier));
    finish(device);

    const auto g = gathered.read(), s = scattered.read(), a = swapped.read(), b = bcast.read(),
               out = redOut.read(), sc = fromRoot.read(), root = rooted.read();
    for (int q = 0; q < p; ++q) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(g[q * n + i], block(q, i)) << "allgather";
        // all_to_all: block q came from rank q, which sent its block r: block(r, i) + q.
        EXPECT_EQ(a[q * n + i], block(r, i) + q) << "all_to_all";
        if (r == 0) {
          EXPECT_EQ(root[q * n + i], block(q, i)) << "gather";
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(s[i], p * block(r, i) + p * (p - 1) / 2) << "reduce_scatter";
      EXPECT_EQ(b[i], block(1, i)) << "broadcast from 1";
      if (r == 2) {
        EXPECT_EQ(out[i], block(p - 1, i)) << "reduce max at 2";
      }
      EXPECT_EQ(sc[i], block(r, i) + 1) << "scatter from 1";  // root 1's buffer holds block + 1
    }
  });
}

TEST(NcclGpu, SendAndRecvPassARing) {
  CHORUS_SKIP_WITHOUT_GPU();
  forkGpuRanks(3, [](const BackendOptions& options) {
    auto backend = createNcclBackend(options);
    DeviceBackend& device = *backend->deviceBackend();
    const int r = options.rank, p = options.size;
    DeviceArray<int64_t> out(std::vector<int64_t>(9, r)), in(9);
    device.startAfter(0, false);
    // Even ranks send first: NCCL's point-to-point calls block the stream until matched.
    for (int step = 0; step < 2; ++step) {
      if ((r % 2 == 0) == (step == 0))
        device.send(callOf(Collective::kPointToPoint), out.get(), 72, (r + 1) % p, 0);
      else
        device.recv(callOf(Collective::kPointToPoint), in.get(), 72, (r + p - 1) % p, 0);
    }
    finish(device);
    EXPECT_EQ(in.read(), std::vector<int64_t>(9, (r + p - 1) % p));
  });
}

TEST(NcclGpu, HalfPrecisionSumsAreExactOnSmallIntegers) {
  CHORUS_SKIP_WITHOUT_GPU();
  forkGpuRanks(2, [](const BackendOptions& options) {
    auto backend = createNcclBackend(options);
    DeviceBackend& device = *backend->deviceBackend();
    // 1.0 and 2.0 in float16 (0x3c00, 0x4000) and bfloat16 (0x3f80, 0x4000); the sum 3.0 is
    // 0x4200 and 0x4040.
    const uint16_t one16 = 0x3c00, oneBf = 0x3f80, two = 0x4000;
    const bool first = options.rank == 0;
    DeviceArray<uint16_t> half(std::vector<uint16_t>(33, first ? one16 : two));
    DeviceArray<uint16_t> brain(std::vector<uint16_t>(33, first ? oneBf : two));
    device.startAfter(0, false);
    device.allreduce(callOf(Collective::kAllreduce),
                     {half.get(), half.get(), 33, DataType::kFloat16, ReduceOp::kSum});
    device.allreduce(callOf(Collective::kAllreduce),
                     {brain.get(), brain.get(), 33, DataType::kBFloat16, ReduceOp::kSum});
    finish(device);
    EXPECT_EQ(half.read(), std::vector<uint16_t>(33, 0x4200));
    EXPECT_EQ(brain.read(), std::vector<uint16_t>(33, 0x4040));
  });
}

// The caller's stream is held up by a host function (a deliberately slow producer) before it
// writes the input; a collective ordered after it must see the written values, and the caller's
// stream, ordered after the collective, must see the result without a host wait in between.
void sleepOnTheStream(void*) { std::this_thread::sleep_for(300ms); }

TEST(NcclGpu, TheCollectiveRunsAfterASlowProducerAndBeforeTheConsumer) {
  CHORUS_SKIP_WITHOUT_GPU();
  forkGpuRanks(2, [](const BackendOptions& options) {
    auto backend = createNcclBackend(options);
    DeviceBackend& device = *backend->deviceBackend();
    cudaStream_t producer;
    CUDA_OK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    constexpr size_t n = 1 << 16;
    DeviceArray<int32_t> data(n);
    CUDA_OK(cudaLaunchHostFunc(producer, sleepOnTheStream, nullptr));
    CUDA_OK(cudaMemsetAsync(data.get(), options.rank + 1, n * sizeof(int32_t), producer));
    device.startAfter(reinterpret_cast<StreamHandle>(producer), false);
    device.allreduce(callOf(Collective::kAllreduce),
                     {data.get(), data.get(), n, DataType::kInt32, ReduceOp::kSum});
    device.recordEnd()->orderBefore(reinterpret_cast<StreamHandle>(producer));
    std::vector<int32_t> result(n);
    CUDA_OK(cudaMemcpyAsync(result.data(), data.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                            producer));
    CUDA_OK(cudaStreamSynchronize(producer));
    // Each rank memset bytes of rank + 1: ints of 0x01010101 and 0x02020202.
    EXPECT_EQ(result, std::vector<int32_t>(n, 0x01010101 + 0x02020202));
    cudaStreamDestroy(producer);
  });
}

// Blocking calls run on the caller's stream, async ones on the backend's (Note [Blocking calls on
// the caller's stream]); interleaved over two caller streams and a growing scratch buffer, each
// call still sees the one before: every allreduce of two equal values doubles them.
TEST(NcclGpu, CallsOnCallersStreamsAndOnItsOwnRunInCallOrder) {
  CHORUS_SKIP_WITHOUT_GPU();
  forkGpuRanks(2, [](const BackendOptions& options) {
    auto backend = createNcclBackend(options);
    DeviceBackend& device = *backend->deviceBackend();
    cudaStream_t a, b;
    CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    constexpr size_t n = 1 << 16;
    DeviceArray<float> data(std::vector<float>(n, 1.0f));
    CUDA_OK(cudaDeviceSynchronize());  // the upload ran on the legacy stream, a and b ignore it
    auto doubled = [&](cudaStream_t stream, bool onCallerStream) {
      device.startAfter(reinterpret_cast<StreamHandle>(stream), onCallerStream);
      device.allreduce(callOf(Collective::kAllreduce),
                       {data.get(), data.get(), n, DataType::kFloat32, ReduceOp::kSum});
      return device.recordEnd();
    };
    doubled(a, true);   // 2
    doubled(a, false);  // 4, on the backend's stream
    doubled(b, true);   // 8
    device.startAfter(reinterpret_cast<StreamHandle>(a), true);
    device.barrier(callOf(Collective::kBarrier));  // a scratch buffer, on a
    device.recordEnd();
    doubled(b, false);                                    // 16
    doubled(a, true)->synchronize(Deadline::after(60s));  // 32
    EXPECT_EQ(data.read(), std::vector<float>(n, 32.0f));
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  });
}

TEST(NcclGpu, ARankThatNeverCallsIsATimeoutNotAHang) {
  CHORUS_SKIP_WITHOUT_GPU();
  forkGpuRanks(2, [](const BackendOptions& options) {
    auto backend = createNcclBackend(options);
    DeviceBackend& device = *backend->deviceBackend();
    if (options.rank == 1) {
      std::this_thread::sleep_for(8s);  // alive but silent, until rank 0 has given up
      return;
    }
    DeviceArray<float> data(1024);
    // The first collective connects the ranks (NCCL connects at run time), and NCCL's enqueue
    // waits there for rank 1 (seen on an H200, NCCL 2.28): the enqueue's own deadline must end it
    // then, else the wait on the device does.
    DeviceCallContext call = callOf(Collective::kAllreduce);
    call.deadline = Deadline::after(2s);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(
        {
          device.startAfter(0, false);
          device.allreduce(call,
                           {data.get(), data.get(), 1024, DataType::kFloat32, ReduceOp::kSum});
          device.recordEnd()->synchronize(Deadline::after(2s));
        },
        TimeoutError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    // The failure latches: the next call says the same.
    EXPECT_THROW(device.startAfter(0, false), TimeoutError);
  });
}

}  // namespace
}  // namespace chorus::backend::nccl
