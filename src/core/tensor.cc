// Tensor: a non-owning strided view (see chorus/tensor.h). Construction validates shape and
// strides; everything else is arithmetic on them.
#include "chorus/tensor.h"

#include <algorithm>
#include <sstream>

#include "core/check.h"

namespace chorus {
namespace {

void checkShape(std::span<const int64_t> shape) {
  for (size_t i = 0; i < shape.size(); ++i) {
    CHORUS_CHECK_ARG(shape[i] >= 0, "tensor dimension ", i, " has negative extent ", shape[i]);
  }
}

void appendList(std::ostringstream& out, std::span<const int64_t> values) {
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) {
    out << (i == 0 ? "" : ", ") << values[i];
  }
  out << ']';
}

// Row-major strides of `shape` into `strides` (as many); returns the number of elements. Throws,
// naming the first, if an extent is negative.
int64_t fillContiguousStrides(std::span<const int64_t> shape, int64_t* strides) {
  int64_t stride = 1;
  int64_t count = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] < 0)
      checkShape(shape);
    strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
    count *= shape[i];
  }
  return count;
}

}  // namespace

void Tensor::resize(size_t dim) {
  dim_ = static_cast<int>(dim);
  if (dim_ > kInlineDims)
    heap_.assign(2 * dim, 0);
}

Tensor::Tensor(void* data, DataType dtype, std::span<const int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device) {
  dataTypeSize(dtype_);  // throws on an out-of-range dtype
  resize(shape.size());
  std::copy(shape.begin(), shape.end(), extents());
  numel_ = fillContiguousStrides(shape, extents() + dim_);  // checks the shape
  contiguous_ = true;
}

Tensor::Tensor(void* data,
               DataType dtype,
               std::span<const int64_t> shape,
               std::span<const int64_t> strides,
               Device device)
    : data_(data), dtype_(dtype), device_(device) {
  checkShape(shape);
  dataTypeSize(dtype_);
  CHORUS_CHECK_ARG(strides.size() == shape.size(), "tensor has ", shape.size(), " dimensions but ",
                   strides.size(), " strides; pass one stride per dimension");
  resize(shape.size());
  std::copy(shape.begin(), shape.end(), extents());
  std::copy(strides.begin(), strides.end(), extents() + dim_);
  summarize();
}

void Tensor::summarize() {
  numel_ = 1;
  for (int64_t extent : shape()) numel_ *= extent;
  contiguous_ = true;
  if (numel_ == 0)
    return;  // no element is ever addressed
  const auto extent = shape();
  const auto stride = strides();
  int64_t expected = 1;
  for (size_t i = extent.size(); i-- > 0;) {
    if (extent[i] == 1)
      continue;
    if (stride[i] != expected) {
      contiguous_ = false;
      return;
    }
    expected *= extent[i];
  }
}

Tensor Tensor::reshaped(std::span<const int64_t> shape) const {
  CHORUS_CHECK_ARG(isContiguous(), "cannot reshape the non-contiguous tensor ", describe(),
                   "; make it contiguous first (e.g. .contiguous() in PyTorch)");
  checkShape(shape);
  Tensor result(data_, dtype_, shape, device_);
  CHORUS_CHECK_ARG(result.numel() == numel(), "cannot view ", describe(), " (", numel(),
                   " elements) as ", result.describe(), " (", result.numel(), " elements)");
  return result;
}

std::string Tensor::describe() const {
  std::ostringstream out;
  out << toString(dtype_);
  appendList(out, shape());
  out << ' ' << device_.toString();
  if (!isContiguous()) {
    out << " strides ";
    appendList(out, strides());
  }
  return out.str();
}

std::vector<int64_t> Tensor::contiguousStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  fillContiguousStrides(shape, strides.data());
  return strides;
}

}  // namespace chorus
