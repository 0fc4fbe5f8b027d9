// Tensor views: shapes, strides, contiguity, reshaping and descriptions (chorus/tensor.h).
#include "chorus/tensor.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus {
namespace {

TEST(TensorTest, ContiguousConstruction) {
  float values[6] = {};
  Tensor tensor(values, {2, 3});
  EXPECT_EQ(tensor.data(), values);
  EXPECT_EQ(tensor.dtype(), DataType::kFloat32);
  EXPECT_EQ(tensor.dim(), 2);
  EXPECT_EQ(tensor.numel(), 6);
  EXPECT_EQ(tensor.nbytes(), 24u);
  EXPECT_EQ(tensor.elementSize(), 4u);
  EXPECT_EQ(tensor.strides(), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(tensor.isContiguous());
  EXPECT_TRUE(tensor.device().isCpu());
}

TEST(TensorTest, ContiguousStrides) {
  EXPECT_EQ(Tensor::contiguousStrides({}), (std::vector<int64_t>{}));
  EXPECT_EQ(Tensor::contiguousStrides({5}), (std::vector<int64_t>{1}));
  EXPECT_EQ(Tensor::contiguousStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(Tensor::contiguousStrides({2, 0, 4}), (std::vector<int64_t>{4, 4, 1}));
}

TEST(TensorTest, ScalarAndEmpty) {
  double value = 1;
  Tensor scalar(&value, std::vector<int64_t>{});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_TRUE(scalar.isContiguous());
  Tensor empty(nullptr, DataType::kInt32, {3, 0}, {7, 5});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.nbytes(), 0u);
  EXPECT_TRUE(empty.isContiguous());
}

TEST(TensorTest, StridedViews) {
  int32_t values[12] = {};
  Tensor transposed(values, DataType::kInt32, {3, 4}, {1, 3});
  EXPECT_FALSE(transposed.isContiguous());
  Tensor everyOther(values, DataType::kInt32, {6}, {2});
  EXPECT_FALSE(everyOther.isContiguous());
  // Extent-1 dimensions may have any stride.
  Tensor unitDims(values, DataType::kInt32, {1, 4, 1}, {99, 1, 42});
  EXPECT_TRUE(unitDims.isContiguous());
  Tensor rowMajor(values, DataType::kInt32, {3, 4}, {4, 1});
  EXPECT_TRUE(rowMajor.isContiguous());
}

TEST(TensorTest, RejectsBadShapes) {
  float values[4] = {};
  EXPECT_THROW(Tensor(values, DataType::kFloat32, {2, 2}, {1}), InvalidArgumentError);
  EXPECT_THROW(Tensor(values, DataType::kFloat32, {-1, 2}), InvalidArgumentError);
  EXPECT_THROW(Tensor(values, static_cast<DataType>(77), {4}), InvalidArgumentError);
}

TEST(TensorTest, Reshaped) {
  uint8_t values[24] = {};
  Tensor tensor(values, {2, 3, 4});
  Tensor flat = tensor.reshaped({24});
  EXPECT_EQ(flat.shape(), (std::vector<int64_t>{24}));
  EXPECT_EQ(flat.strides(), (std::vector<int64_t>{1}));
  EXPECT_EQ(flat.data(), values);
  EXPECT_EQ(flat.dtype(), DataType::kUInt8);
  EXPECT_EQ(tensor.reshaped({6, 4}).strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_THROW(tensor.reshaped({5, 5}), InvalidArgumentError);
  Tensor strided(values, DataType::kUInt8, {4, 3}, {1, 4});
  EXPECT_THROW(strided.reshaped({12}), InvalidArgumentError);
}

TEST(TensorTest, Describe) {
  float values[6] = {};
  EXPECT_EQ(Tensor(values, {2, 3}).describe(), "float32[2, 3] cpu");
  EXPECT_EQ(Tensor(values, DataType::kBFloat16, {6}, Device::cuda(1)).describe(),
            "bfloat16[6] cuda:1");
  EXPECT_EQ(Tensor(values, DataType::kInt64, {}).describe(), "int64[] cpu");
  EXPECT_EQ(Tensor(values, DataType::kFloat32, {3, 2}, {1, 3}).describe(),
            "float32[3, 2] cpu strides [1, 3]");
}

}  // namespace
}  // namespace chorus
