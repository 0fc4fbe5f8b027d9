// The nccl backend's one conversion of NCCL and CUDA codes (backend/nccl/nccl_status.h): each code
// becomes the error class its table promises, and the message names the rank, the call and the
// library's name for the code. Runs without a GPU: only the codes are involved.
#include "backend/nccl/nccl_status.h"

#include <gtest/gtest.h>

#include <string>
#include <typeinfo>

#include "chorus/error.h"

namespace chorus::backend::nccl {
namespace {

// The exception checkNccl throws for `result`, caught as the base class.
template <typename Call>
std::string messageOf(Call call, const std::type_info& expected) {
  try {
    call();
  } catch (const Error& error) {
    EXPECT_EQ(std::string(typeid(error).name()), std::string(expected.name())) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return "";
}

TEST(NcclStatus, SuccessAndInProgressAreNotErrors) {
  EXPECT_NO_THROW(checkNccl(ncclSuccess, "ncclAllReduce", 3));
  EXPECT_NO_THROW(checkNccl(ncclInProgress, "ncclAllReduce", 3));
  EXPECT_NO_THROW(checkCuda(cudaSuccess, "cudaMemcpyAsync", 3));
}

TEST(NcclStatus, EachNcclCodeBecomesItsErrorClass) {
  struct Row {
    ncclResult_t code;
    const std::type_info& error;
  };
  const Row rows[] = {
      {ncclInvalidArgument, typeid(InvalidArgumentError)},
      {ncclInvalidUsage, typeid(InvalidArgumentError)},
      {ncclRemoteError, typeid(PeerError)},
      {ncclInternalError, typeid(InternalError)},
      {ncclUnhandledCudaError, typeid(Error)},
      {ncclSystemError, typeid(Error)},
  };
  for (const Row& row : rows) {
    const std::string message =
        messageOf([&] { checkNccl(row.code, "ncclAllReduce", 3, "peer 5 hung up"); }, row.error);
    EXPECT_NE(message.find("rank 3 (this process): ncclAllReduce failed in NCCL"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(ncclGetErrorString(row.code)), std::string::npos) << message;
    EXPECT_NE(message.find("peer 5 hung up"), std::string::npos) << message;
  }
}

TEST(NcclStatus, ARemoteErrorNamesNoPeerWhenNcclDoesNot) {
  try {
    checkNccl(ncclRemoteError, "ncclSend", 0);
    FAIL() << "no error";
  } catch (const PeerError& error) {
    EXPECT_EQ(error.peerRank(), -1);
  }
}

TEST(NcclStatus, EachCudaCodeBecomesItsErrorClass) {
  struct Row {
    cudaError_t code;
    const std::type_info& error;
    const char* words;  // what the message must add for this class
  };
  const Row rows[] = {
      {cudaErrorNoDevice, typeid(UnsupportedError), "need an NVIDIA GPU"},
      {cudaErrorInsufficientDriver, typeid(UnsupportedError), "need an NVIDIA GPU"},
      {cudaErrorInvalidValue, typeid(InvalidArgumentError), "cudaErrorInvalidValue"},
      {cudaErrorInvalidDevice, typeid(InvalidArgumentError), "cudaErrorInvalidDevice"},
      {cudaErrorMemoryAllocation, typeid(Error), "out of memory"},
      {cudaErrorLaunchFailure, typeid(Error), "cudaErrorLaunchFailure"},
  };
  for (const Row& row : rows) {
    const std::string message = messageOf([&] { checkCuda(row.code, "cudaMalloc", 1); }, row.error);
    EXPECT_NE(message.find("rank 1 (this process): cudaMalloc failed in CUDA"), std::string::npos)
        << message;
    EXPECT_NE(message.find(cudaGetErrorName(row.code)), std::string::npos) << message;
    EXPECT_NE(message.find(row.words), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace chorus::backend::nccl
