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
//  - Tensors are plain values: cheap to copy (no allocation up to kInlineDims dimensions), safe to
//    read from several threads.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chorus/types.h"

struct DLManagedTensor;

namespace chorus {

class Tensor {
 public:
  // Shapes and strides of up to this many dimensions live inside the Tensor: making, copying and
  // passing one allocates nothing (a blocking collective allocates nothing either; issue 19).
  // More dimensions are kept on the heap.
  static constexpr int kInlineDims = 6;

  Tensor() = default;
  // A contiguous tensor of `shape` at `data`.
  Tensor(void* data, DataType dtype, std::span<const int64_t> shape, Device device = Device::cpu());
  Tensor(void* data,
         DataType dtype,
         std::initializer_list<int64_t> shape,
         Device device = Device::cpu())
      : Tensor(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device) {}
  // A strided tensor. strides.size() must equal shape.size().
  Tensor(void* data,
         DataType dtype,
         std::span<const int64_t> shape,
         std::span<const int64_t> strides,
         Device device = Device::cpu());
  Tensor(void* data,
         DataType dtype,
         std::initializer_list<int64_t> shape,
         std::initializer_list<int64_t> strides,
         Device device = Device::cpu())
      : Tensor(data,
               dtype,
               std::span<const int64_t>(shape.begin(), shape.size()),
               std::span<const int64_t>(strides.begin(), strides.size()),
               device) {}
  // A contiguous tensor of C++ elements: Tensor(values.data(), {n}).
  template <typename T>
  Tensor(T* data, std::span<const int64_t> shape)
      : Tensor(static_cast<void*>(data), dataTypeOf<std::remove_const_t<T>>(), shape) {}
  template <typename T>
  Tensor(T* data, std::initializer_list<int64_t> shape)
      : Tensor(static_cast<void*>(data),
               dataTypeOf<std::remove_const_t<T>>(),
               std::span<const int64_t>(shape.begin(), shape.size())) {}

  // A view of `managed` (which stays owned by the caller). Unsupported dtypes or devices are
  // InvalidArgumentError / UnsupportedError.
  static Tensor fromDLPack(const DLManagedTensor* managed);
  // A new DLManagedTensor over the same memory. The consumer calls its deleter exactly once; the
  // deleter releases `owner` (if any), so an owner of the memory keeps it alive until then.
  DLManagedTensor* toDLPack(std::shared_ptr<const void> owner = nullptr) const;

  void* data() const { return data_; }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Views into this Tensor: valid while it lives and is not assigned to.
  std::span<const int64_t> shape() const { return {extents(), static_cast<size_t>(dim_)}; }
  std::span<const int64_t> strides() const { return {extents() + dim_, static_cast<size_t>(dim_)}; }
  int dim() const { return dim_; }
  int64_t numel() const { return numel_; }
  size_t elementSize() const { return dataTypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * elementSize(); }
  // True when the strides are row-major for the shape (dimensions of extent 1 may have any stride).
  bool isContiguous() const { return contiguous_; }
  // The same memory viewed with another shape of equal numel; the tensor must be contiguous.
  Tensor reshaped(std::span<const int64_t> shape) const;
  Tensor reshaped(std::initializer_list<int64_t> shape) const {
    return reshaped(std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // "float32[2, 3] cpu".
  std::string describe() const;
  // Row-major strides for `shape`.
  static std::vector<int64_t> contiguousStrides(std::span<const int64_t> shape);
  static std::vector<int64_t> contiguousStrides(std::initializer_list<int64_t> shape) {
    return contiguousStrides(std::span<const int64_t>(shape.begin(), shape.size()));
  }

 private:
  // The shape (dim_ values) followed by the strides (dim_ values), inline or on the heap.
  const int64_t* extents() const { return dim_ <= kInlineDims ? inline_.data() : heap_.data(); }
  int64_t* extents() { return dim_ <= kInlineDims ? inline_.data() : heap_.data(); }
  // Sets dim_ and makes room for `dim` extents and strides.
  void resize(size_t dim);
  // Sets numel_ and contiguous_ from the extents and strides (computed once: every call asks).
  void summarize();

  void* data_ = nullptr;
  DataType dtype_ = DataType::kFloat32;
  int dim_ = 0;
  bool contiguous_ = true;
  int64_t numel_ = 1;  // of no dimensions: a scalar
  std::array<int64_t, 2 * kInlineDims> inline_{};
  std::vector<int64_t> heap_;
  Device device_;
};

}  // namespace chorus
