// Multi-rank GPU tests on a machine with one GPU (issue 18's harness switch).
//
// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected") unless each
// process has its own NCCL_HOSTID; NCCL then treats every rank as a host of its own and connects
// them with its socket transport, which NCCL_SOCKET_IFNAME=lo keeps on loopback. Slow, but
// correct. forkGpuRanks sets both in each rank's process before NCCL starts.
//
// CUDA does not survive fork(): a process that initialized CUDA cannot use it in its children.
// So the test process itself never touches CUDA: gpuMissingReason() asks in a child.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/options.h"
#include "harness/run_ranks.h"
#include "store/store.h"

namespace chorus::testing {

// Device memory holding `values`, copied back by read(); read() uses the legacy default
// stream, so it follows a collective that wait() ordered before that stream.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : count_(values.size()) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, count_) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  explicit DeviceArray(size_t count) : DeviceArray(std::vector<T>(count, T{})) {}
  ~DeviceArray() { cudaFree(data_); }
  T* get() const { return static_cast<T*>(data_); }
  std::vector<T> read() const {
    std::vector<T> values(count_);
    EXPECT_EQ(cudaMemcpy(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return values;
  }

 private:
  void* data_ = nullptr;
  size_t count_;
};

// Empty when this machine has a usable GPU; else why not (CUDA's words). Asked once, in a child.
const std::string& gpuMissingReason();

// Skips the test (saying why) on a machine without a GPU.
#define CHORUS_SKIP_WITHOUT_GPU()                                                       \
  do {                                                                                  \
    if (!::chorus::testing::gpuMissingReason().empty())                                 \
      GTEST_SKIP() << "needs an NVIDIA GPU: " << ::chorus::testing::gpuMissingReason(); \
  } while (0)

// Makes this process an NCCL host of its own (NCCL_HOSTID from `rank`, NCCL_SOCKET_IFNAME=lo),
// so that ranks in several processes may share one GPU. Call before NCCL starts in the process.
void becomeOwnNcclHost(int rank);

// What each GPU rank gets: BackendOptions for an nccl backend of all ranks on GPU 0 (a FileStore
// shared by the ranks carries NCCL's unique id), and its rank and size.
using GpuRankFunction = std::function<void(const backend::BackendOptions& options)>;

// Runs fn in `size` processes (forkRanks: killed at options.deadline, failures reported per
// rank), each with NCCL_HOSTID and NCCL_SOCKET_IFNAME=lo set. EXPECTs that every rank succeeded.
void forkGpuRanks(int size, const GpuRankFunction& fn, const RankOptions& options = {});

}  // namespace chorus::testing
