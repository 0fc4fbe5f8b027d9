// Tensor <-> DLPack (v0.6 layout, /usr/include/dlpack/dlpack.h), the array interchange format that
// NumPy, PyTorch, JAX and CuPy speak.
//
// fromDLPack makes a view without taking ownership: data + byte_offset, shape and strides copied
// (null strides mean row-major). toDLPack allocates one block holding the DLManagedTensor and
// copies of shape and strides (and the optional owner); its deleter frees that block, releasing the
// owner, and never frees the data itself.
//
// dtypes: float 16/32/64, bfloat 16, int 8/32/64, uint 8, and bool as type code 6 with 8 bits
// (kDLBool in DLPack >= 0.8; the installed v0.6 header predates it). Vector types (lanes != 1) are
// refused. Devices: kDLCPU and kDLCUDAHost (pinned host memory) are cpu, kDLCUDA is cuda:N.
#include <dlpack/dlpack.h>

#include <memory>

#include "chorus/tensor.h"
#include "core/check.h"

namespace chorus {
namespace {

constexpr uint8_t kDLBoolCode = 6;  // kDLBool, added to DLDataTypeCode after v0.6

struct DLTypeMapping {
  uint8_t code;
  uint8_t bits;
  DataType dtype;
};
constexpr DLTypeMapping kTypeMappings[] = {
    {kDLFloat, 16, DataType::kFloat16},
    {kDLBfloat, 16, DataType::kBFloat16},
    {kDLFloat, 32, DataType::kFloat32},
    {kDLFloat, 64, DataType::kFloat64},
    {kDLInt, 8, DataType::kInt8},
    {kDLUInt, 8, DataType::kUInt8},
    {kDLInt, 32, DataType::kInt32},
    {kDLInt, 64, DataType::kInt64},
    {kDLBoolCode, 8, DataType::kBool},
    {kDLInt, 16, DataType::kInt16},
    {kDLUInt, 16, DataType::kUInt16},
    {kDLUInt, 32, DataType::kUInt32},
    {kDLUInt, 64, DataType::kUInt64},
    {kDLComplex, 64, DataType::kComplex64},
    {kDLComplex, 128, DataType::kComplex128},
};

DataType fromDLDataType(DLDataType type) {
  CHORUS_CHECK_ARG(type.lanes == 1, "DLPack tensor has vector elements (", type.lanes,
                   " lanes); chorus needs scalar elements (lanes == 1)");
  for (const auto& mapping : kTypeMappings) {
    if (mapping.code == type.code && mapping.bits == type.bits) {
      return mapping.dtype;
    }
  }
  throw InvalidArgumentError(detail::concat(
      "DLPack dtype (code ", int{type.code}, ", ", int{type.bits},
      " bits) is not supported; chorus supports float16, bfloat16, float32, float64, int8, uint8, "
      "int16, uint16, int32, uint32, int64, uint64, bool, complex64 and complex128"));
}

DLDataType toDLDataType(DataType dtype) {
  for (const auto& mapping : kTypeMappings) {
    if (mapping.dtype == dtype) {
      return {mapping.code, mapping.bits, 1};
    }
  }
  throw InvalidArgumentError(detail::concat("invalid DataType ", static_cast<int>(dtype)));
}

Device fromDLDevice(DLDevice device) {
  switch (device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::cpu();
    case kDLCUDA:
      return Device::cuda(device.device_id);
    default:
      throw UnsupportedError(detail::concat(
          "DLPack device type ", static_cast<int>(device.device_type),
          " is not supported; chorus takes CPU (kDLCPU, kDLCUDAHost) and CUDA (kDLCUDA) tensors"));
  }
}

// The block behind a DLManagedTensor made by toDLPack.
struct ExportedTensor {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::shared_ptr<const void> owner;  // the memory's owner, released by the deleter
};

void deleteExported(DLManagedTensor* self) {
  if (self != nullptr) {
    delete static_cast<ExportedTensor*>(self->manager_ctx);
  }
}

}  // namespace

Tensor Tensor::fromDLPack(const DLManagedTensor* managed) {
  CHORUS_CHECK_ARG(managed != nullptr, "fromDLPack got a null DLManagedTensor");
  const DLTensor& tensor = managed->dl_tensor;
  CHORUS_CHECK_ARG(tensor.ndim >= 0, "DLPack tensor has negative ndim ", tensor.ndim);
  CHORUS_CHECK_ARG(tensor.ndim == 0 || tensor.shape != nullptr, "DLPack tensor with ndim ",
                   tensor.ndim, " has a null shape");
  DataType dtype = fromDLDataType(tensor.dtype);
  Device device = fromDLDevice(tensor.device);
  const std::span<const int64_t> shape(tensor.shape, static_cast<size_t>(tensor.ndim));
  for (int64_t extent : shape) {
    CHORUS_CHECK_ARG(extent >= 0, "DLPack tensor has a negative dimension ", extent);
  }
  void* data = static_cast<char*>(tensor.data) + tensor.byte_offset;
  if (tensor.strides == nullptr)
    return Tensor(data, dtype, shape, device);
  return Tensor(data, dtype, shape,
                std::span<const int64_t>(tensor.strides, static_cast<size_t>(tensor.ndim)), device);
}

DLManagedTensor* Tensor::toDLPack(std::shared_ptr<const void> owner) const {
  auto exported = std::make_unique<ExportedTensor>();
  exported->owner = std::move(owner);
  exported->shape.assign(shape().begin(), shape().end());
  exported->strides.assign(strides().begin(), strides().end());
  DLTensor& tensor = exported->managed.dl_tensor;
  tensor.data = data_;
  tensor.device = device_.isCpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, device_.index};
  tensor.ndim = dim();
  tensor.dtype = toDLDataType(dtype_);
  tensor.shape = exported->shape.data();
  tensor.strides = exported->strides.data();
  tensor.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = &deleteExported;
  return &exported.release()->managed;
}

}  // namespace chorus
