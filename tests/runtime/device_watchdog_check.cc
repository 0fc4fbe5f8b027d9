// Run through chorusrun by ctest (device_watchdog_killed_rank): a rank dies while the other's
// collective on "CUDA" tensors is still running on the device. Nothing on the host would notice:
// rank 0 makes no host call, and its device work (the fake backend of fake_device_backend.h,
// standing in for an NCCL kernel that waits for the dead rank) never ends on its own. The
// watchdog must read chorusrun's record of the death and fail rank 0's wait with a PeerError
// naming rank 1 well within chorusrun's failure grace (3 s), after which rank 0 would be killed.
//
// With the argument "nccl-notice", rank 0's device work instead fails at once, as NCCL's does when
// the dead rank's socket closes: a PeerError naming nobody, usually before chorusrun has reaped
// the rank. The host wait must still name rank 1, from chorusrun's record (device_watchdog_nccl_
// notice; on a GPU, python_cuda_killed_rank_np2 saw NCCL's error first, naming rank -1).
#include <signal.h>
#include <string.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "chorus/chorus.h"
#include "fake_device_backend.h"
#include "runtime/device_work.h"

int main(int argc, char** argv) {
  const bool ncclNotice = argc > 1 && strcmp(argv[1], "nccl-notice") == 0;
  chorus::testing::installFakeDeviceBackend();
  chorus::testing::setFakeDeviceHangs(true);
  auto comm = chorus::DistContext::get().communicator();
  std::vector<float> values(4, 1.0f);
  auto work = comm->allreduce(
      chorus::Tensor(values.data(), chorus::DataType::kFloat32, {4}, chorus::Device::cuda(0)));
  comm->barrier()->wait();  // both ranks' checks passed
  // Rank 1 dies only once rank 0 is done with the host side, so only the watchdog can see it.
  std::vector<char> byte(1);
  if (comm->rank() == 1) {
    comm->recv(chorus::Tensor(byte.data(), chorus::DataType::kUInt8, {1}), 0)->wait();
    raise(SIGKILL);
  }
  comm->send(chorus::Tensor(byte.data(), chorus::DataType::kUInt8, {1}), 1)->wait();
  if (ncclNotice)
    chorus::testing::setFakeDevicePeerGone(true);
  const auto start = std::chrono::steady_clock::now();
  try {
    dynamic_cast<chorus::detail::DeviceWork&>(*work).synchronize(
        chorus::Deadline::after(std::chrono::seconds(60)));
    std::fprintf(stderr, "rank 0: the device work ended although rank 1 died\n");
    return 1;
  } catch (const chorus::PeerError& e) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "rank 0 caught PeerError naming rank %d after %.1f s: %s\n", e.peerRank(),
                 seconds, e.what());
    return 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "rank 0 caught another error: %s\n", e.what());
    return 1;
  }
}
