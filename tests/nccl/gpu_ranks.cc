// Multi-rank GPU tests on one GPU: see gpu_ranks.h.
#include "gpu_ranks.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "backend/nccl/cuda_device.h"
#include "store/file_store.h"

namespace chorus::testing {

const std::string& gpuMissingReason() {
  static const std::string reason = [] {
    int fds[2];
    if (pipe(fds) != 0)
      return std::string("pipe() failed");
    const pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      const auto& devices = backend::nccl::visibleDevices();
      const std::string answer = devices.count > 0 ? "" : devices.whyNone;
      ssize_t written = write(fds[1], answer.data(), answer.size());
      _exit(written == static_cast<ssize_t>(answer.size()) ? 0 : 1);
    }
    close(fds[1]);
    std::string answer;
    char buffer[256];
    for (ssize_t got; (got = read(fds[0], buffer, sizeof(buffer))) > 0;) answer.append(buffer, got);
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return std::string("the child that asked CUDA for devices failed");
    return answer;
  }();
  return reason;
}

void becomeOwnNcclHost(int rank) {
  setenv("NCCL_HOSTID", ("chorus-test-rank-" + std::to_string(rank)).c_str(), 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
}

void forkGpuRanks(int size, const GpuRankFunction& fn, const RankOptions& options) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() /
      ("chorus-gpu-" + std::to_string(getpid()) + "-" + test->name());
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  RankOptions hostOptions = options;
  hostOptions.backend = "tcp";  // the host communicator only numbers the processes
  const auto statuses = forkRanks(
      size,
      [&](Communicator& comm) {
        becomeOwnNcclHost(comm.rank());
        backend::BackendOptions nccl;
        nccl.name = "nccl";
        nccl.rank = comm.rank();
        nccl.size = comm.size();
        nccl.store = std::make_shared<store::FileStore>((folder / "store").string());
        nccl.scope = test->name();
        nccl.device = 0;
        nccl.deadline = Deadline::after(options.timeout);
        fn(nccl);
      },
      hostOptions);
  expectAllSucceeded(statuses);
  std::filesystem::remove_all(folder);
}

}  // namespace chorus::testing
