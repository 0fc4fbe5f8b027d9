// DataType, ReduceOp and Device names, sizes, parsing and validity (chorus/types.h).
#include <gtest/gtest.h>

#include <iterator>
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
      {DataType::kFloat16, 2, "float16", true},
      {DataType::kBFloat16, 2, "bfloat16", true},
      {DataType::kFloat32, 4, "float32", true},
      {DataType::kFloat64, 8, "float64", true},
      {DataType::kInt8, 1, "int8", false},
      {DataType::kUInt8, 1, "uint8", false},
      {DataType::kInt32, 4, "int32", false},
      {DataType::kInt64, 8, "int64", false},
      {DataType::kBool, 1, "bool", false},
      {DataType::kInt16, 2, "int16", false},
      {DataType::kUInt16, 2, "uint16", false},
      {DataType::kUInt32, 4, "uint32", false},
      {DataType::kUInt64, 8, "uint64", false},
      {DataType::kComplex64, 8, "complex64", false},
      {DataType::kComplex128, 16, "complex128", false},
  };
  static_assert(std::size(expected) == kNumDataTypes);
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
  EXPECT_EQ(parseDataType("short"), DataType::kInt16);
  EXPECT_EQ(parseDataType("cfloat"), DataType::kComplex64);
  EXPECT_EQ(parseDataType("cdouble"), DataType::kComplex128);
  try {
    parseDataType("complex32");
    FAIL() << "no exception";
  } catch (const InvalidArgumentError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("complex32"), std::string::npos) << message;
    EXPECT_NE(message.find("bfloat16"), std::string::npos) << message;
    EXPECT_NE(message.find("complex128"), std::string::npos) << message;
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
    const std::string name(toString(dtype));
    const bool floating = name.starts_with("float") || name == "bfloat16";
    const bool complex = name.starts_with("complex");
    const bool isBool = dtype == DataType::kBool;
    EXPECT_EQ(isFloatingPoint(dtype), floating) << name;
    EXPECT_EQ(isComplex(dtype), complex) << name;
    for (auto op : {ReduceOp::kSum, ReduceOp::kProd}) {
      EXPECT_TRUE(isValidReduction(op, dtype));
    }
    for (auto op : {ReduceOp::kMin, ReduceOp::kMax}) {
      EXPECT_EQ(isValidReduction(op, dtype), !complex) << toString(op) << name;
    }
    EXPECT_EQ(isValidReduction(ReduceOp::kAvg, dtype), !isBool) << name;
    for (auto op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
      EXPECT_EQ(isValidReduction(op, dtype), !floating && !complex) << toString(op) << name;
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
