// chorus/tensor.h — Tensor, a non-owning view of an n-dimensional array: data, dtype, shape,
// strides and device.
//
// Contract:
//  - A Tensor never owns or frees its data; the caller keeps the memory alive for as long as any
//    operation that uses the view is in flight (until its Work completes).
//  - Strides are in elements, as in DLPack and PyTorch. Collectives require contiguous (row-major)
//    tensors; a non-contiguous one is refused with InvalidArgumentError, never read wrong.
//  - fromDLPack() makes a view of a DLManagedTensor without taking ownership of it; toDLPack()
//    makes a new DLManagedTensor describing the same memory, whose deleter frees only the metadata
//    it allocated.
//  - Tensors are plain values: cheap to copy, safe to read from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "chorus/types.h"

struct DLManagedTensor;

namespace chorus {

class Tensor {
 public:
  Tensor() = default;
  // A contiguous tensor of `shape` at `data`.
  Tensor(void* data, DataType dtype, std::vector<int64_t> shape, Device device = Device::cpu());
  // A strided tensor. strides.size() must equal shape.size().
  Tensor(void* data,
         DataType dtype,
         std::vector<int64_t> shape,
         std::vector<int64_t> strides,
         Device device = Device::cpu());
  // A contiguous tensor of C++ elements: Tensor(values.data(), {n}).
  template <typename T>
  Tensor(T* data, std::vector<int64_t> shape)
      : Tensor(static_cast<void*>(data), dataTypeOf<std::remove_const_t<T>>(), std::move(shape)) {}

  // A view of `managed` (which stays owned by the caller). Unsupported dtypes or devices are
  // InvalidArgumentError / UnsupportedError.
  static Tensor fromDLPack(const DLManagedTensor* managed);
  // A new DLManagedTensor over the same memory. The consumer calls its deleter exactly once; the
  // deleter releases `owner` (if any), so an owner of the memory keeps it alive until then.
  DLManagedTensor* toDLPack(std::shared_ptr<const void> owner = nullptr) const;

  void* data() const { return data_; }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t elementSize() const { return dataTypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * elementSize(); }
  // True when the strides are row-major for the shape (dimensions of extent 1 may have any stride).
  bool isContiguous() const;
  // The same memory viewed with another shape of equal numel; the tensor must be contiguous.
  Tensor reshaped(std::vector<int64_t> shape) const;
  // "float32[2, 3] cpu".
  std::string describe() const;

  // Row-major strides for `shape`.
  static std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& shape);

 private:
  void* data_ = nullptr;
  DataType dtype_ = DataType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  Device device_;
};

}  // namespace chorus
