// DataType, ReduceOp and Device names, sizes, parsing and validity (chorus/types.h).
#include <gtest/gtest.h>

#include <string>

#include "chorus/error.h"
#include "chorus/types.h"
#include "test_support.h"

namespace chorus::test {
namespace {

TEST(DataTypeTest, SizesAndNames) {
  const struct {
    DataType dtype;
    size_t size;
    const char* name;
    bool floating;
  } expected[] = {
      {DataType::kFloat16, 2, "float16", true}, {DataType::kBFloat16, 2, "bfloat16", true},
      {DataType::kFloat32, 4, "float32", true}, {DataType::kFloat64, 8, "float64", true},
      {DataType::kInt8, 1, "int8", false},      {DataType::kUInt8, 1, "uint8", false},
      {DataType::kInt32, 4, "int32", false},    {DataType::kInt64, 8, "int64", false},
      {DataType::kBool, 1, "bool", false},
  };
  for (const auto& e : expected) {
    EXPECT_EQ(dataTypeSize(e.dtype), e.size) << e.name;
    EXPECT_EQ(toString(e.dtype), e.name);
    EXPECT_EQ(parseDataType(e.name), e.dtype);
    EXPECT_EQ(isFloatingPoint(e.dtype), e.floating) << e.name;
  }
  EXPECT_THROW(dataTypeSize(static_cast<DataType>(200)), InvalidArgumentError);
}

TEST(DataTypeTest, ParsesAliasesAndRejectsUnknownNames) {
  EXPECT_EQ(parseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(parseDataType("float"), DataType::kFloat32);
  EXPECT_EQ(parseDataType("double"), DataType::kFloat64);
  EXPECT_EQ(parseDataType("int"), DataType::kInt32);
  EXPECT_EQ(parseDataType("long"), DataType::kInt64);
  try {
    parseDataType("complex64");
    FAIL() << "no exception";
  } catch (const InvalidArgumentError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("complex64"), std::string::npos) << message;
    EXPECT_NE(message.find("bfloat16"), std::string::npos) << message;
  }
  EXPECT_THROW(parseDataType(""), InvalidArgumentError);
  EXPECT_THROW(parseDataType("Float32"), InvalidArgumentError);
}

TEST(ReduceOpTest, NamesRoundTrip) {
  const char* names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  for (int i = 0; i < kNumReduceOps; ++i) {
    EXPECT_EQ(toString(static_cast<ReduceOp>(i)), names[i]);
    EXPECT_EQ(parseReduceOp(names[i]), static_cast<ReduceOp>(i));
  }
  try {
    parseReduceOp("mean");
    FAIL() << "no exception";
  } catch (const InvalidArgumentError& e) {
    std::string message = e.what();
    for (const char* name : names) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
    }
  }
}

TEST(ReduceOpTest, ValidityTable) {
  for (auto dtype : kAllDataTypes) {
    bool floating = isFloatingPoint(dtype);
    bool isBool = dtype == DataType::kBool;
    for (auto op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      EXPECT_TRUE(isValidReduction(op, dtype));
    }
    EXPECT_EQ(isValidReduction(ReduceOp::kAvg, dtype), !isBool) << toString(dtype);
    for (auto op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
      EXPECT_EQ(isValidReduction(op, dtype), !floating) << toString(op) << toString(dtype);
    }
  }
  EXPECT_FALSE(isValidReduction(static_cast<ReduceOp>(99), DataType::kInt32));
  EXPECT_FALSE(isValidReduction(ReduceOp::kSum, static_cast<DataType>(99)));
}

TEST(DeviceTest, ToString) {
  EXPECT_EQ(Device::cpu().toString(), "cpu");
  EXPECT_EQ(Device::cuda(3).toString(), "cuda:3");
  EXPECT_TRUE(Device().isCpu());
  EXPECT_FALSE(Device::cuda(0).isCpu());
  EXPECT_EQ(Device::cuda(1), Device::cuda(1));
  EXPECT_NE(Device::cuda(1), Device::cuda(2));
}

}  // namespace
}  // namespace chorus::test
