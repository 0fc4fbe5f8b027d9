// Tensor <-> DLPack: every dtype both ways, strided views, byte offsets, devices, and refusals.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <memory>

#include "chorus/error.h"
#include "chorus/tensor.h"
#include "test_support.h"

namespace chorus::test {
namespace {

std::vector<int64_t> asVector(std::span<const int64_t> values) {
  return {values.begin(), values.end()};
}

struct DeleteManaged {
  void operator()(DLManagedTensor* managed) const { managed->deleter(managed); }
};
using ManagedPtr = std::unique_ptr<DLManagedTensor, DeleteManaged>;

// The DLPack type each dtype must map to (bool is code 6, kDLBool in DLPack >= 0.8).
DLDataType expectedDLType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return {kDLFloat, 16, 1};
    case DataType::kBFloat16:
      return {kDLBfloat, 16, 1};
    case DataType::kFloat32:
      return {kDLFloat, 32, 1};
    case DataType::kFloat64:
      return {kDLFloat, 64, 1};
    case DataType::kInt8:
      return {kDLInt, 8, 1};
    case DataType::kUInt8:
      return {kDLUInt, 8, 1};
    case DataType::kInt32:
      return {kDLInt, 32, 1};
    case DataType::kInt64:
      return {kDLInt, 64, 1};
    case DataType::kBool:
      return {6, 8, 1};
    case DataType::kInt16:
      return {kDLInt, 16, 1};
    case DataType::kUInt16:
      return {kDLUInt, 16, 1};
    case DataType::kUInt32:
      return {kDLUInt, 32, 1};
    case DataType::kUInt64:
      return {kDLUInt, 64, 1};
    case DataType::kComplex64:
      return {kDLComplex, 64, 1};
    case DataType::kComplex128:
      return {kDLComplex, 128, 1};
  }
  return {};
}

// A DLManagedTensor owned by the test, describing `data`.
struct HandMade {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
  HandMade(void* data,
           DLDataType type,
           std::vector<int64_t> shapeIn,
           std::vector<int64_t> stridesIn)
      : shape(std::move(shapeIn)), strides(std::move(stridesIn)) {
    managed.dl_tensor.data = data;
    managed.dl_tensor.device = {kDLCPU, 0};
    managed.dl_tensor.ndim = static_cast<int>(shape.size());
    managed.dl_tensor.dtype = type;
    managed.dl_tensor.shape = shape.data();
    managed.dl_tensor.strides = strides.empty() ? nullptr : strides.data();
  }
};

TEST(DLPackTest, RoundTripsEveryDataType) {
  alignas(16) uint8_t storage[128] = {};
  for (auto dtype : kAllDataTypes) {
    Tensor tensor(storage, dtype, {2, 3});
    ManagedPtr managed(tensor.toDLPack());
    const DLTensor& dl = managed->dl_tensor;
    DLDataType expected = expectedDLType(dtype);
    EXPECT_EQ(dl.dtype.code, expected.code) << toString(dtype);
    EXPECT_EQ(dl.dtype.bits, expected.bits) << toString(dtype);
    EXPECT_EQ(dl.dtype.lanes, 1);
    EXPECT_EQ(dl.data, storage);
    EXPECT_EQ(dl.byte_offset, 0u);
    EXPECT_EQ(dl.ndim, 2);
    EXPECT_EQ(dl.shape[0], 2);
    EXPECT_EQ(dl.shape[1], 3);
    EXPECT_EQ(dl.strides[0], 3);
    EXPECT_EQ(dl.strides[1], 1);
    EXPECT_EQ(dl.device.device_type, kDLCPU);

    Tensor back = Tensor::fromDLPack(managed.get());
    EXPECT_EQ(back.dtype(), dtype);
    EXPECT_EQ(back.data(), storage);
    EXPECT_EQ(asVector(back.shape()), asVector(tensor.shape()));
    EXPECT_EQ(asVector(back.strides()), asVector(tensor.strides()));
    EXPECT_TRUE(back.device().isCpu());
  }
}

TEST(DLPackTest, StridedViewAndByteOffset) {
  float values[24] = {};
  // A transposed 4x3 view of a 3x4 row-major array, starting at element 2 via byte_offset.
  HandMade made(values, {kDLFloat, 32, 1}, {4, 3}, {1, 4});
  made.managed.dl_tensor.byte_offset = 2 * sizeof(float);
  Tensor view = Tensor::fromDLPack(&made.managed);
  EXPECT_EQ(view.data(), values + 2);
  EXPECT_EQ(asVector(view.strides()), (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(view.isContiguous());

  ManagedPtr exported(view.toDLPack());
  EXPECT_EQ(exported->dl_tensor.data, values + 2);
  EXPECT_EQ(exported->dl_tensor.strides[0], 1);
  EXPECT_EQ(exported->dl_tensor.strides[1], 4);
  Tensor again = Tensor::fromDLPack(exported.get());
  EXPECT_EQ(asVector(again.strides()), asVector(view.strides()));
  EXPECT_EQ(asVector(again.shape()), asVector(view.shape()));
}

TEST(DLPackTest, NullStridesAreContiguousAndZeroDim) {
  int64_t values[6] = {};
  HandMade made(values, {kDLInt, 64, 1}, {2, 3}, {});
  Tensor tensor = Tensor::fromDLPack(&made.managed);
  EXPECT_EQ(asVector(tensor.strides()), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(tensor.isContiguous());
  EXPECT_EQ(tensor.dtype(), DataType::kInt64);

  HandMade scalar(values, {kDLFloat, 64, 1}, {}, {});
  scalar.managed.dl_tensor.shape = nullptr;
  Tensor zeroDim = Tensor::fromDLPack(&scalar.managed);
  EXPECT_EQ(zeroDim.dim(), 0);
  EXPECT_EQ(zeroDim.numel(), 1);
}

TEST(DLPackTest, Devices) {
  float values[4] = {};
  HandMade made(values, {kDLFloat, 32, 1}, {4}, {});
  made.managed.dl_tensor.device = {kDLCUDAHost, 0};
  EXPECT_TRUE(Tensor::fromDLPack(&made.managed).device().isCpu());
  made.managed.dl_tensor.device = {kDLCUDA, 3};
  EXPECT_EQ(Tensor::fromDLPack(&made.managed).device(), Device::cuda(3));
  made.managed.dl_tensor.device = {kDLVulkan, 0};
  EXPECT_THROW(Tensor::fromDLPack(&made.managed), UnsupportedError);

  ManagedPtr exported(Tensor(values, DataType::kFloat32, {4}, Device::cuda(2)).toDLPack());
  EXPECT_EQ(exported->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(exported->dl_tensor.device.device_id, 2);
}

TEST(DLPackTest, RefusesVectorLanesAndUnknownTypes) {
  float values[8] = {};
  HandMade lanes(values, {kDLFloat, 32, 4}, {2}, {});
  EXPECT_THROW(Tensor::fromDLPack(&lanes.managed), InvalidArgumentError);
  HandMade complex32(values, {kDLComplex, 32, 1}, {2}, {});  // two float16: not a chorus dtype
  EXPECT_THROW(Tensor::fromDLPack(&complex32.managed), InvalidArgumentError);
  HandMade int128(values, {kDLInt, 128, 1}, {2}, {});
  EXPECT_THROW(Tensor::fromDLPack(&int128.managed), InvalidArgumentError);
  HandMade negative(values, {kDLFloat, 32, 1}, {-2}, {});
  EXPECT_THROW(Tensor::fromDLPack(&negative.managed), InvalidArgumentError);
  EXPECT_THROW(Tensor::fromDLPack(nullptr), InvalidArgumentError);
}

TEST(DLPackTest, UInt8IsNotBool) {
  uint8_t values[4] = {};
  HandMade made(values, {kDLUInt, 8, 1}, {4}, {});
  EXPECT_EQ(Tensor::fromDLPack(&made.managed).dtype(), DataType::kUInt8);
  HandMade flags(values, {6, 8, 1}, {4}, {});
  EXPECT_EQ(Tensor::fromDLPack(&flags.managed).dtype(), DataType::kBool);
}

}  // namespace
}  // namespace chorus::test
