// See gradient_wire.h.
#include "parallel/gradient_wire.h"

#include <algorithm>
#include <vector>

#include "core/reduce_kernels.h"

namespace chorus::parallel {
namespace {

constexpr size_t kChunk = 16384;  // float32 elements converted at a time (64 KiB)

}  // namespace

void narrowDivided(DataType wire, const float* values, void* out, size_t count, int divisor) {
  std::vector<float> divided(std::min(count, kChunk));
  const auto by = static_cast<float>(divisor);
  for (size_t done = 0; done < count; done += kChunk) {
    const size_t n = std::min(kChunk, count - done);
    for (size_t i = 0; i < n; ++i) divided[i] = values[done + i] / by;
    kernels::narrowFromFloat32(wire, divided.data(),
                               static_cast<std::byte*>(out) + done * dataTypeSize(wire), n);
  }
}

void addWidened(DataType wire, const std::byte* values, float* into, size_t count) {
  std::vector<float> widened(std::min(count, kChunk));
  for (size_t done = 0; done < count; done += kChunk) {
    const size_t n = std::min(kChunk, count - done);
    kernels::widenToFloat32(wire, values + done * dataTypeSize(wire), widened.data(), n);
    kernels::reduceInto(ReduceOp::kSum, DataType::kFloat32, into + done, widened.data(), n);
  }
}

}  // namespace chorus::parallel
