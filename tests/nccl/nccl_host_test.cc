// The nccl backend on a machine without a GPU (the CI machines): the device census says why there
// is none, the backend table's row refuses with that reason on every rank, and NCCL's unique id
// still travels through the store (ncclGetUniqueId needs no GPU). On a machine with a GPU the
// refusal test skips, saying so; nccl_gpu_test.cc covers that machine.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/factory.h"
#include "backend/nccl/cuda_device.h"
#include "backend/nccl/nccl_bootstrap.h"
#include "chorus/error.h"
#include "store/hash_store.h"

namespace chorus::backend::nccl {
namespace {

using namespace std::chrono_literals;

TEST(NcclHost, TheDeviceCensusSaysWhyThereIsNoGpu) {
  const VisibleDevices& devices = visibleDevices();
  if (devices.count > 0)
    GTEST_SKIP() << "this machine has " << devices.count << " GPU(s); the census has no reason";
  EXPECT_NE(devices.whyNone.find("cudaGetDeviceCount"), std::string::npos) << devices.whyNone;
}

TEST(NcclHost, TheNcclRowRefusesWithoutAGpuOnEveryRank) {
  if (visibleDevices().count > 0)
    GTEST_SKIP() << "this machine has a GPU: nccl_gpu_test.cc runs the backend there";
  auto store = std::make_shared<store::HashStore>();
  for (int rank = 0; rank < 2; ++rank) {
    BackendOptions options;
    options.name = "nccl";
    options.rank = rank;
    options.size = 2;
    options.worldRanks = {4, 6};
    options.store = store;
    try {
      createBackend(options);
      FAIL() << "backend nccl was made on a machine without a GPU";
    } catch (const UnsupportedError& error) {
      const std::string message = error.what();
      const std::string me = "rank " + std::to_string(options.worldRanks[rank]) + " (this process)";
      EXPECT_NE(message.find(me), std::string::npos) << message;
      EXPECT_NE(message.find("backend 'nccl' needs an NVIDIA GPU"), std::string::npos) << message;
      EXPECT_NE(message.find(visibleDevices().whyNone), std::string::npos) << message;
    }
  }
}

TEST(NcclHost, EveryMemberGetsMemberZerosUniqueId) {
  store::HashStore store;
  constexpr int kSize = 3;
  std::vector<ncclUniqueId> ids(kSize);
  std::vector<std::thread> members;
  // Members 1 and 2 start first, so they really wait for member 0's id.
  for (int rank : {2, 1, 0}) {
    members.emplace_back([&, rank] {
      ids[rank] = shareUniqueId({.store = &store,
                                 .key = "nccl/unique_id",
                                 .rank = rank,
                                 .worldRank = 10 + rank,
                                 .rootWorldRank = 10,
                                 .deadline = Deadline::after(30s)});
    });
  }
  for (auto& member : members) member.join();
  const ncclUniqueId zero{};
  EXPECT_NE(std::memcmp(&ids[0], &zero, sizeof(zero)), 0) << "member 0 made no id";
  for (int rank = 1; rank < kSize; ++rank)
    EXPECT_EQ(std::memcmp(&ids[rank], &ids[0], sizeof(zero)), 0) << "member " << rank;
}

TEST(NcclHost, AMemberWhoseRootNeverPublishesTimesOutNamingIt) {
  store::HashStore store;
  try {
    shareUniqueId({.store = &store,
                   .key = "nccl/unique_id",
                   .rank = 1,
                   .worldRank = 5,
                   .rootWorldRank = 3,
                   .deadline = Deadline::after(50ms)});
    FAIL() << "the id arrived from nowhere";
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.missingRanks(), std::vector<int>{3});
    EXPECT_NE(std::string(error.what())
                  .find("rank 5 (this process): the nccl backend waited for "
                        "rank 3 to publish NCCL's unique id"),
              std::string::npos)
        << error.what();
  }
}

TEST(NcclHost, AMangledIdIsAnInternalError) {
  store::HashStore store;
  store.set("nccl/unique_id", store::toBytes("short"));
  EXPECT_THROW(shareUniqueId({.store = &store,
                              .key = "nccl/unique_id",
                              .rank = 1,
                              .worldRank = 1,
                              .rootWorldRank = 0,
                              .deadline = Deadline::after(1s)}),
               InternalError);
}

}  // namespace
}  // namespace chorus::backend::nccl
