// NCCL and CUDA codes as chorus errors: see nccl_status.h.
#include "backend/nccl/nccl_status.h"

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::backend::nccl {
namespace {

std::string whoCalled(int rank, const char* call) {
  return rank >= 0 ? detail::concat("rank ", rank, " (this process): ", call) : std::string(call);
}

}  // namespace

void checkNccl(ncclResult_t result, const char* call, int rank, const std::string& more) {
  if (result == ncclSuccess || result == ncclInProgress)
    return;
  const std::string message = detail::concat(
      whoCalled(rank, call), " failed in NCCL: ", ncclGetErrorString(result), " (code ",
      static_cast<int>(result), ")", more.empty() ? std::string() : detail::concat(": ", more));
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      throw InvalidArgumentError(message + "; check the tensors' devices, sizes and dtypes");
    case ncclRemoteError:
      throw PeerError(message + "; a peer process or its network connection failed", -1);
    case ncclInternalError:
      throw InternalError(message + "; this is a bug in chorus or NCCL, please report it");
    default:  // ncclUnhandledCudaError, ncclSystemError and codes newer than this header
      throw Error(message +
                  "; the GPU, its driver or the system failed (NCCL_DEBUG=WARN says more)");
  }
}

void checkCuda(cudaError_t result, const char* call, int rank) {
  if (result == cudaSuccess)
    return;
  // Reading the last error resets it unless the error is sticky (the context is then lost anyway).
  cudaGetLastError();
  const std::string message =
      detail::concat(whoCalled(rank, call), " failed in CUDA: ", cudaGetErrorName(result), " (",
                     cudaGetErrorString(result), ")");
  switch (result) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorCompatNotSupportedOnDevice:
      throw UnsupportedError(message +
                             "; CUDA tensors need an NVIDIA GPU and a driver as new as the CUDA "
                             "runtime chorus was built with (nvidia-smi shows both)");
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
      throw InvalidArgumentError(message);
    case cudaErrorMemoryAllocation:
      throw Error(message + "; the GPU is out of memory");
    default:
      throw Error(message);
  }
}

}  // namespace chorus::backend::nccl
