// Tensor views: shapes, strides, contiguity, reshaping and descriptions (chorus/tensor.h).
#include "chorus/tensor.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus {
namespace {

std::vector<int64_t> asVector(std::span<const int64_t> values) {
  return {values.begin(), values.end()};
}

TEST(TensorTest, ContiguousConstruction) {
  float values[6] = {};
  Tensor tensor(values, {2, 3});
  EXPECT_EQ(tensor.data(), values);
  EXPECT_EQ(tensor.dtype(), DataType::kFloat32);
  EXPECT_EQ(tensor.dim(), 2);
  EXPECT_EQ(tensor.numel(), 6);
  EXPECT_EQ(tensor.nbytes(), 24u);
  EXPECT_EQ(tensor.elementSize(), 4u);
  EXPECT_EQ(asVector(tensor.strides()), (std::vector<int64_t>{3, 1}));
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
  EXPECT_EQ(asVector(flat.shape()), (std::vector<int64_t>{24}));
  EXPECT_EQ(asVector(flat.strides()), (std::vector<int64_t>{1}));
  EXPECT_EQ(flat.data(), values);
  EXPECT_EQ(flat.dtype(), DataType::kUInt8);
  EXPECT_EQ(asVector(tensor.reshaped({6, 4}).strides()), (std::vector<int64_t>{4, 1}));
  EXPECT_THROW(tensor.reshaped({5, 5}), InvalidArgumentError);
  Tensor strided(values, DataType::kUInt8, {4, 3}, {1, 4});
  EXPECT_THROW(strided.reshaped({12}), InvalidArgumentError);
}

// Past kInlineDims the extents live on the heap: construction, copies, assignment and strides
// behave the same on both sides of the boundary.
TEST(TensorTest, ManyDimensions) {
  uint8_t values[256] = {};
  for (int dim : {Tensor::kInlineDims, Tensor::kInlineDims + 1, 8}) {
    const std::vector<int64_t> shape(dim, 2);
    std::vector<int64_t> expectedStrides(dim);
    for (int d = 0; d < dim; ++d) expectedStrides[d] = int64_t{1} << (dim - 1 - d);
    Tensor tensor(values, shape);
    Tensor copy = tensor;
    Tensor assigned(values, {1});
    assigned = copy;
    for (const Tensor* t : {&tensor, &copy, &assigned}) {
      EXPECT_EQ(t->dim(), dim);
      EXPECT_EQ(t->numel(), int64_t{1} << dim);
      EXPECT_EQ(asVector(t->shape()), shape);
      EXPECT_EQ(asVector(t->strides()), expectedStrides);
      EXPECT_TRUE(t->isContiguous());
    }
    std::vector<int64_t> reversed(expectedStrides.rbegin(), expectedStrides.rend());
    Tensor strided(values, DataType::kUInt8, shape, reversed);
    EXPECT_EQ(asVector(strided.strides()), reversed);
    EXPECT_FALSE(strided.isContiguous());
  }
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
