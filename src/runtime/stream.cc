// The calling thread's current CUDA stream: see chorus/stream.h.
#include "chorus/stream.h"

namespace chorus {
namespace {
thread_local CudaStream current = 0;
}  // namespace

void setCurrentStream(CudaStream stream) { current = stream; }
CudaStream currentStream() { return current; }

}  // namespace chorus
