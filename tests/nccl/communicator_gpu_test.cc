// CUDA tensors through the Communicator (runtime/communicator_device.h): one communicator runs
// host tensors on its host backend and CUDA tensors on nccl, results are safe on the caller's
// stream after wait() with no host wait, lists are fused, and concatenation along an inner axis
// is interleaved on the device. Ranks are processes sharing one GPU (gpu_ranks.h); the tests skip
// on a machine without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "gpu_ranks.h"
#include "runtime/device_work.h"

namespace chorus {
namespace {

using testing::becomeOwnNcclHost;
using testing::DeviceArray;
using testing::forkRanks;

// A float32 view of `array` on cuda:0.
Tensor onGpu(const DeviceArray<float>& array, std::vector<int64_t> shape) {
  return Tensor(array.get(), DataType::kFloat32, std::move(shape), Device::cuda(0));
}

TEST(CommunicatorGpu, HostAndCudaTensorsShareOneCommunicator) {
  CHORUS_SKIP_WITHOUT_GPU();
  testing::expectAllSucceeded(forkRanks(3, [](Communicator& comm) {
    becomeOwnNcclHost(comm.rank());
    const float r = static_cast<float>(comm.rank());
    DeviceArray<float> a(std::vector<float>{r, r + 1}), b(std::vector<float>{10 * r});
    comm.allreduce({onGpu(a, {2}), onGpu(b, {1})})->wait();  // fused: one NCCL allreduce
    EXPECT_EQ(a.read(), (std::vector<float>{0 + 1 + 2, 1 + 2 + 3}));
    EXPECT_EQ(b.read(), (std::vector<float>{30}));
    std::vector<float> host = {r};
    comm.allreduce(Tensor(host.data(), {1}))->wait();  // the host backend, same communicator
    EXPECT_EQ(host, (std::vector<float>{3}));
  }));
}

TEST(CommunicatorGpu, AllgatherAlongAnInnerAxisInterleavesOnTheDevice) {
  CHORUS_SKIP_WITHOUT_GPU();
  testing::expectAllSucceeded(forkRanks(2, [](Communicator& comm) {
    becomeOwnNcclHost(comm.rank());
    const float r = static_cast<float>(comm.rank());
    // A 2 x 2 input per rank; along axis 1 the output's row i is rank 0's row i, rank 1's row i.
    DeviceArray<float> in(std::vector<float>{10 * r, 10 * r + 1, 10 * r + 2, 10 * r + 3});
    DeviceArray<float> out(std::vector<float>(8, -1));
    comm.allgather(onGpu(in, {2, 2}), onGpu(out, {2, 4}), 1)->wait();
    EXPECT_EQ(out.read(), (std::vector<float>{0, 1, 10, 11, 2, 3, 12, 13}));
  }));
}

TEST(CommunicatorGpu, AnAsyncHandleReportsCompletionFromTheDevice) {
  CHORUS_SKIP_WITHOUT_GPU();
  testing::expectAllSucceeded(forkRanks(2, [](Communicator& comm) {
    becomeOwnNcclHost(comm.rank());
    DeviceArray<float> data(std::vector<float>(1 << 20, 1.0f));
    auto work = comm.allreduce(onGpu(data, {1 << 20}), ReduceOp::kAvg);
    auto* device = dynamic_cast<detail::DeviceWork*>(work.get());
    ASSERT_NE(device, nullptr) << "a CUDA collective did not return a DeviceWork";
    device->synchronize(Deadline::after(std::chrono::seconds(60)));
    EXPECT_TRUE(work->isCompleted());
    EXPECT_EQ(data.read(), std::vector<float>(1 << 20, 1.0f));
  }));
}

// [[0, 2], [1]] split from the world after the world's NCCL communicator exists: ncclCommSplit
// on every rank, then each group reduces its own values. With `settleInputs`, the device is
// synchronized after the inputs are written: a cudaMemcpy from pageable memory may return before
// its DMA lands, and only the legacy stream's order covers it. In the third GPU session the plain
// test read each rank's own input of the group {0, 2} as zero in 2 of 6 runs; running both, ten
// times each, tells whether that ordering is the cause (scripts/gpu_session.sh, split_repeat).
void splitTheWorld(bool settleInputs) {
  testing::expectAllSucceeded(forkRanks(3, [settleInputs](Communicator& comm) {
    becomeOwnNcclHost(comm.rank());
    const float r = static_cast<float>(comm.rank());
    DeviceArray<float> data(std::vector<float>{r + 1});
    comm.allreduce(onGpu(data, {1}))->wait();  // the world's NCCL communicator exists now
    EXPECT_EQ(data.read(), (std::vector<float>{6}));
    auto group = comm.split(comm.rank() == 1 ? 1 : 0, comm.rank());
    DeviceArray<float> mine(std::vector<float>{r + 1});
    if (settleInputs) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    group->allreduce(onGpu(mine, {1}))->wait();
    EXPECT_EQ(mine.read(), (std::vector<float>{comm.rank() == 1 ? 2.0f : 1.0f + 3.0f}));
  }));
}

TEST(CommunicatorGpu, GroupsSplitTheWorldsNcclCommunicator) {
  CHORUS_SKIP_WITHOUT_GPU();
  splitTheWorld(/*settleInputs=*/false);
}

TEST(CommunicatorGpu, GroupsSplitTheWorldsNcclCommunicatorWithSettledInputs) {
  CHORUS_SKIP_WITHOUT_GPU();
  splitTheWorld(/*settleInputs=*/true);
}

TEST(CommunicatorGpu, MismatchedCallsAreAMismatchErrorNotAHang) {
  CHORUS_SKIP_WITHOUT_GPU();
  testing::expectAllSucceeded(forkRanks(2, [](Communicator& comm) {
    becomeOwnNcclHost(comm.rank());
    // Rank 1 reduces twice as many elements: NCCL alone would wait for the rest forever.
    DeviceArray<float> data(std::vector<float>(comm.rank() == 0 ? 1024 : 2048, 1.0f));
    auto work = comm.allreduce(onGpu(data, {static_cast<int64_t>(comm.rank() == 0 ? 1024 : 2048)}));
    const auto start = std::chrono::steady_clock::now();
    try {
      dynamic_cast<detail::DeviceWork&>(*work).synchronize(
          Deadline::after(std::chrono::seconds(60)));
      ADD_FAILURE() << "rank " << comm.rank() << ": a mismatched allreduce went unnoticed";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("count"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }));
}

TEST(CommunicatorGpu, ARankThatNeverCallsIsNamed) {
  CHORUS_SKIP_WITHOUT_GPU();
  testing::RankOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  int done[2];  // rank 0 writes a byte once it has its error; rank 1 stays alive until then
  ASSERT_EQ(pipe(done), 0);
  testing::expectAllSucceeded(forkRanks(
      2,
      [&](Communicator& comm) {
        becomeOwnNcclHost(comm.rank());
        DeviceArray<float> data(std::vector<float>(16, 1.0f));
        comm.allreduce(onGpu(data, {16}))->wait();  // both ranks have an NCCL communicator
        if (comm.rank() == 1) {
          pollfd wakeUp{done[0], POLLIN, 0};
          EXPECT_EQ(poll(&wakeUp, 1, 60'000), 1) << "rank 0 never reported its error";
          return;
        }
        auto work = comm.allreduce(onGpu(data, {16}));
        try {
          dynamic_cast<detail::DeviceWork&>(*work).synchronize(
              Deadline::after(std::chrono::seconds(60)));
          ADD_FAILURE() << "an allreduce without rank 1 completed";
        } catch (const TimeoutError& e) {
          EXPECT_EQ(e.missingRanks(), std::vector<int>{1}) << e.what();
        }
        EXPECT_EQ(write(done[1], "x", 1), 1);
      },
      options));
  close(done[0]);
  close(done[1]);
}

// As above, but rank 1 never calls the first allreduce at all: NCCL connects the ring for it at
// run time, and rank 0's enqueue can wait there (seen on an H200). The host check, queued before
// the enqueue, must still name rank 1 after the timeout and end that wait (Note [Device
// fingerprint check]). A send/recv first makes both NCCL communicators without connecting a ring.
TEST(CommunicatorGpu, ARankThatNeverCallsItsFirstCollectiveIsNamed) {
  CHORUS_SKIP_WITHOUT_GPU();
  testing::RankOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  testing::expectAllSucceeded(forkRanks(
      2,
      [&](Communicator& comm) {
        becomeOwnNcclHost(comm.rank());
        DeviceArray<float> data(std::vector<float>(16, 1.0f));
        if (comm.rank() == 1) {
          comm.recv(onGpu(data, {16}), 0)->wait();
          pollfd wakeUp{done[0], POLLIN, 0};
          EXPECT_EQ(poll(&wakeUp, 1, 60'000), 1) << "rank 0 never reported its error";
          return;
        }
        comm.send(onGpu(data, {16}), 1)->wait();
        const auto start = std::chrono::steady_clock::now();
        try {
          auto work = comm.allreduce(onGpu(data, {16}));
          dynamic_cast<detail::DeviceWork&>(*work).synchronize(
              Deadline::after(std::chrono::seconds(60)));
          ADD_FAILURE() << "an allreduce without rank 1 completed";
        } catch (const TimeoutError& e) {
          EXPECT_EQ(e.missingRanks(), std::vector<int>{1}) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
        EXPECT_EQ(write(done[1], "x", 1), 1);
      },
      options));
  close(done[0]);
  close(done[1]);
}

}  // namespace
}  // namespace chorus
