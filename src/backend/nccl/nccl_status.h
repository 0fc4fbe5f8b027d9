// The one place where NCCL and CUDA status codes become chorus errors (STYLE: vendor codes are
// converted in one place per backend). Every nccl-backend call into NCCL or the CUDA runtime goes
// through checkNccl / checkCuda, so each failure reads the same way: "rank R (this process): CALL
// failed in NCCL|CUDA: <library text>; <what it means for the job>".
//
// Mapping (the library's own name of the code is always in the message):
//   NCCL  ncclInvalidArgument, ncclInvalidUsage   InvalidArgumentError (a bad call: chorus's bug
//                                                 when it passes validated arguments, so
//                                                 nccl_backend checks its own arguments first)
//         ncclRemoteError                         PeerError (a peer's process or network failed;
//                                                 peer -1 when NCCL does not say which)
//         ncclInternalError                       InternalError
//         ncclUnhandledCudaError, ncclSystemError Error (the device, driver or OS failed)
//         ncclInProgress                          not an error: the call is still running (the
//                                                 non-blocking communicators' answer); callers
//                                                 poll ncclCommGetAsyncError
//   CUDA  no device, driver too old/missing       UnsupportedError (what to install or check)
//         invalid value / device / handle         InvalidArgumentError
//         out of memory                           Error, with the bytes asked for when known
//         anything else                           Error
//
// Thread-safe; these functions only read the code and format text.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace chorus::backend::nccl {

// Throws the chorus error for `result` (see the table above) unless it is ncclSuccess or
// ncclInProgress. `call` names the NCCL function, `rank` this process's world rank (-1: unknown),
// `more` is appended to the library's text when non-empty (e.g. ncclGetLastError's words).
void checkNccl(ncclResult_t result, const char* call, int rank, const std::string& more = {});

// Throws the chorus error for `result` unless it is cudaSuccess. Clears CUDA's sticky last-error
// state for non-sticky errors, so that a later call does not report this one again.
void checkCuda(cudaError_t result, const char* call, int rank);

}  // namespace chorus::backend::nccl
