// Tensor: a non-owning strided view (see chorus/tensor.h). Construction validates shape and
// strides; everything else is arithmetic on them.
#include "chorus/tensor.h"

#include <sstream>

#include "core/check.h"

namespace chorus {
namespace {

void checkShape(const std::vector<int64_t>& shape) {
  for (size_t i = 0; i < shape.size(); ++i) {
    CHORUS_CHECK_ARG(shape[i] >= 0, "tensor dimension ", i, " has negative extent ", shape[i]);
  }
}

void appendList(std::ostringstream& out, const std::vector<int64_t>& values) {
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) {
    out << (i == 0 ? "" : ", ") << values[i];
  }
  out << ']';
}

}  // namespace

Tensor::Tensor(void* data, DataType dtype, std::vector<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), shape_(std::move(shape)), device_(device) {
  checkShape(shape_);
  dataTypeSize(dtype_);  // throws on an out-of-range dtype
  strides_ = contiguousStrides(shape_);
}

Tensor::Tensor(void* data,
               DataType dtype,
               std::vector<int64_t> shape,
               std::vector<int64_t> strides,
               Device device)
    : data_(data),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      device_(device) {
  checkShape(shape_);
  dataTypeSize(dtype_);
  CHORUS_CHECK_ARG(strides_.size() == shape_.size(), "tensor has ", shape_.size(),
                   " dimensions but ", strides_.size(), " strides; pass one stride per dimension");
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape_) {
    count *= extent;
  }
  return count;
}

bool Tensor::isContiguous() const {
  if (numel() == 0) {
    return true;  // no element is ever addressed
  }
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) {
      continue;
    }
    if (strides_[i] != expected) {
      return false;
    }
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  CHORUS_CHECK_ARG(isContiguous(), "cannot reshape the non-contiguous tensor ", describe(),
                   "; make it contiguous first (e.g. .contiguous() in PyTorch)");
  checkShape(shape);
  Tensor result(data_, dtype_, std::move(shape), device_);
  CHORUS_CHECK_ARG(result.numel() == numel(), "cannot view ", describe(), " (", numel(),
                   " elements) as ", result.describe(), " (", result.numel(), " elements)");
  return result;
}

std::string Tensor::describe() const {
  std::ostringstream out;
  out << toString(dtype_);
  appendList(out, shape_);
  out << ' ' << device_.toString();
  if (!isContiguous()) {
    out << " strides ";
    appendList(out, strides_);
  }
  return out.str();
}

std::vector<int64_t> Tensor::contiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

}  // namespace chorus
