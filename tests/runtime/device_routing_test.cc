// How the Communicator sorts host and CUDA tensors (runtime/communicator_device.h), checked without
// a GPU: the checks run before any CUDA call. Mixing host and CUDA tensors, or two GPUs, in one
// call is InvalidArgumentError on the calling rank, and the communicator still works afterwards;
// the current stream (chorus/stream.h) is per thread and restored by StreamGuard.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

using testing::runRanks;

// `call` must throw InvalidArgumentError whose message holds `words`.
template <typename Call>
void expectRefused(Call call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected an error saying: " << words;
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(DeviceRouting, HostAndCudaTensorsInOneCallAreRefusedAndNothingIsSent) {
  runRanks(2, [](Communicator& comm) {
    std::vector<float> host(4, 1.0f), other(8, 0.0f);
    // Fake device pointers: the check refuses the call before anything reads them.
    Tensor gpu0(other.data(), DataType::kFloat32, {4}, Device::cuda(0));
    Tensor gpu1(other.data(), DataType::kFloat32, {4}, Device::cuda(1));
    Tensor cpu(host.data(), {4});
    const std::string mix = "mixes host and CUDA tensors";
    expectRefused([&] { comm.allreduce({cpu, gpu0}); }, mix);
    expectRefused([&] { comm.allreduce({gpu0, cpu}); }, mix);
    expectRefused([&] { comm.allgather(gpu0, Tensor(other.data(), {8})); }, mix);
    expectRefused([&] { comm.reduceScatter(Tensor(other.data(), {8}), gpu0); }, mix);
    expectRefused(
        [&] { comm.allToAll(Tensor(other.data(), DataType::kFloat32, {4}, Device::cuda(0)), cpu); },
        mix);
    expectRefused([&] { comm.allreduce({gpu0, gpu1}); }, "one call takes tensors of one GPU");
    const std::vector<int64_t> twos{2, 2};
    expectRefused([&] { comm.allToAllV(cpu, twos, gpu0, twos); }, mix);
    expectRefused([&] { comm.allgatherV(gpu0, Tensor(other.data(), {8}), twos); }, mix);
    // The uneven forms take host tensors only: refused before anything is sent, on this rank.
    try {
      comm.allToAllV(gpu0, twos, Tensor(other.data(), DataType::kFloat32, {4}, Device::cuda(0)),
                     twos);
      ADD_FAILURE() << "no error";
    } catch (const UnsupportedError& error) {
      EXPECT_NE(std::string(error.what()).find("all_to_all_v of CUDA tensors"), std::string::npos)
          << error.what();
    }
    comm.allreduce(cpu)->wait();  // nothing was sent: the communicator still works
    EXPECT_EQ(host, std::vector<float>(4, 2.0f));
  });
}

TEST(DeviceRouting, TheCurrentStreamIsPerThreadAndRestoredByTheGuard) {
  EXPECT_EQ(currentStream(), CudaStream{0});  // CUDA's legacy default stream
  {
    StreamGuard outer(0x1234);
    EXPECT_EQ(currentStream(), CudaStream{0x1234});
    {
      StreamGuard inner(2);
      EXPECT_EQ(currentStream(), CudaStream{2});
    }
    EXPECT_EQ(currentStream(), CudaStream{0x1234});
    CudaStream seenElsewhere = 99;
    std::thread([&] { seenElsewhere = currentStream(); }).join();
    EXPECT_EQ(seenElsewhere, CudaStream{0});
  }
  EXPECT_EQ(currentStream(), CudaStream{0});
}

}  // namespace
}  // namespace chorus
