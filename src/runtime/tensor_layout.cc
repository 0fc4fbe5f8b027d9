#include "runtime/tensor_layout.h"

#include <cstdint>

#include "core/check.h"
#include "core/copy_bytes.h"

namespace chorus::detail {

void checkTensor(const Tensor& tensor, std::string_view what, std::string_view op, int rank) {
  CHORUS_CHECK_ARG(tensor.isContiguous(), "rank ", rank, " (this process): ", op, ": ", what, " (",
                   tensor.describe(),
                   ") is not contiguous; pass a contiguous tensor "
                   "(e.g. .contiguous() in PyTorch, np.ascontiguousarray in NumPy)");
  CHORUS_CHECK_ARG(tensor.data() != nullptr || tensor.numel() == 0, "rank ", rank,
                   " (this process): ", op, ": ", what, " has no data pointer");
}

void checkListedTensor(const Tensor& tensor, size_t index, std::string_view op, int rank) {
  const bool fine = tensor.isContiguous() && (tensor.data() != nullptr || tensor.numel() == 0);
  if (!fine)
    checkTensor(tensor, concat("tensor ", index), op, rank);
}

void checkOutputFor(const Tensor& input, const Tensor& output, std::string_view op, int rank) {
  checkTensor(output, "output", op, rank);
  CHORUS_CHECK_ARG(output.dtype() == input.dtype() && output.numel() == input.numel(), "rank ",
                   rank, " (this process): ", op, ": output (", output.describe(),
                   ") must have the input's dtype and number of elements (", input.describe(), ")");
  const auto in = reinterpret_cast<std::uintptr_t>(input.data());
  const auto out = reinterpret_cast<std::uintptr_t>(output.data());
  const bool disjoint = out + output.nbytes() <= in || in + input.nbytes() <= out;
  CHORUS_CHECK_ARG(in == out || disjoint, "rank ", rank, " (this process): ", op,
                   ": input and output overlap without being the same tensor; pass the same "
                   "tensor twice (in place) or separate ones");
}

void checkApart(const Tensor& input, const Tensor& output, std::string_view op, int rank) {
  const auto in = reinterpret_cast<std::uintptr_t>(input.data());
  const auto out = reinterpret_cast<std::uintptr_t>(output.data());
  const bool disjoint = input.nbytes() == 0 || output.nbytes() == 0 ||
                        out + output.nbytes() <= in || in + input.nbytes() <= out;
  CHORUS_CHECK_ARG(disjoint, "rank ", rank, " (this process): ", op, ": input (", input.describe(),
                   ") and output (", output.describe(),
                   ") share memory; this operation needs separate tensors");
}

int normalizeAxis(int axis, int dims, std::string_view what, std::string_view op, int rank) {
  int normalized = axis < 0 ? axis + dims : axis;
  CHORUS_CHECK_ARG(normalized >= 0 && normalized < dims, "rank ", rank, " (this process): ", op,
                   ": ", what, "=", axis, " is out of range for a tensor of ", dims, " dimensions");
  return normalized;
}

AxisLayout axisLayout(const Tensor& tensor, int axis) {
  AxisLayout layout;
  size_t rowElements = 1;
  for (int d = 0; d < tensor.dim(); ++d) {
    if (d < axis) {
      layout.outer *= static_cast<size_t>(tensor.shape()[d]);
    } else {
      rowElements *= static_cast<size_t>(tensor.shape()[d]);
    }
  }
  layout.rowBytes = rowElements * tensor.elementSize();
  return layout;
}

void interleaveBlocks(const void* blocks, void* out, int parts, const AxisLayout& layout) {
  const auto* from = static_cast<const std::byte*>(blocks);
  auto* to = static_cast<std::byte*>(out);
  const size_t blockBytes = layout.outer * layout.rowBytes;
  for (size_t row = 0; row < layout.outer; ++row) {
    for (int part = 0; part < parts; ++part) {
      copyBytes(to, from + part * blockBytes + row * layout.rowBytes, layout.rowBytes);
      to += layout.rowBytes;
    }
  }
}

void deinterleaveBlocks(const void* in, void* blocks, int parts, const AxisLayout& partLayout) {
  const auto* from = static_cast<const std::byte*>(in);
  auto* to = static_cast<std::byte*>(blocks);
  const size_t blockBytes = partLayout.outer * partLayout.rowBytes;
  for (size_t row = 0; row < partLayout.outer; ++row) {
    for (int part = 0; part < parts; ++part) {
      copyBytes(to + part * blockBytes + row * partLayout.rowBytes, from, partLayout.rowBytes);
      from += partLayout.rowBytes;
    }
  }
}

}  // namespace chorus::detail
