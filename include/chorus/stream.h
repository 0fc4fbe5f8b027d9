// chorus/stream.h — the CUDA stream that collectives on CUDA tensors follow, chosen per thread.
//
// Contract:
//  - A collective on CUDA tensors starts after the work queued so far on the calling thread's
//    current stream (it reads what that work wrote), and after the communicator's previous one. It
//    runs on the communicator's own stream, or, issued under BlockingCalls (a blocking call), on
//    the current stream itself. Its Work's wait() makes the waiting thread's current stream wait
//    for the collective's end without blocking the host; DeviceWork::synchronize() blocks the host
//    (see chorus/work.h).
//  - The current stream is a cudaStream_t's value. The default, 0, is CUDA's legacy default
//    stream, what CUDA code uses when it names none. Set it where the program queues its work on
//    another stream (PyTorch: torch.cuda.current_stream(); chorus's Python front end passes it
//    on every call).
//  - Per thread; StreamGuard restores the previous stream when it ends. Host-memory collectives
//    ignore it. Nothing here touches CUDA: the value is only remembered.
#pragma once

#include <cstdint>

namespace chorus {

// A cudaStream_t's value, as an integer so that this header needs no CUDA headers.
using CudaStream = std::uintptr_t;

void setCurrentStream(CudaStream stream);
CudaStream currentStream();

class StreamGuard {
 public:
  explicit StreamGuard(CudaStream stream) : previous_(currentStream()) { setCurrentStream(stream); }
  ~StreamGuard() { setCurrentStream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  CudaStream previous_;
};

}  // namespace chorus
