#include "test_values.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace chorus::algorithms::testing {

const std::vector<Reduction>& testReductions() {
  static const std::vector<Reduction> reductions = {
      {DataType::kFloat32, ReduceOp::kSum}, {DataType::kInt32, ReduceOp::kSum},
      {DataType::kFloat64, ReduceOp::kMax}, {DataType::kInt64, ReduceOp::kProd},
      {DataType::kInt32, ReduceOp::kMin},
  };
  return reductions;
}

double contribution(ReduceOp op, int rank, size_t index) {
  switch (op) {
    case ReduceOp::kSum:
      return (rank + 1) * static_cast<double>(index % 13 + 1);
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      return static_cast<double>(index % 13) + rank;
    case ReduceOp::kProd:
      return 1.0 + static_cast<double>((index + rank) % 2);
    default:
      throw std::logic_error("no closed form for this op");
  }
}

double expectedReduction(ReduceOp op, int size, size_t index) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<double>(index % 13 + 1) * size * (size + 1) / 2;
    case ReduceOp::kMax:
      return static_cast<double>(index % 13) + size - 1;
    case ReduceOp::kMin:
      return static_cast<double>(index % 13);
    case ReduceOp::kProd: {
      const int odd = index % 2 == 0 ? size / 2 : (size + 1) / 2;
      return std::ldexp(1.0, odd);
    }
    default:
      throw std::logic_error("no closed form for this op");
  }
}

void storeValue(DataType dtype, void* base, size_t index, double value) {
  switch (dtype) {
    case DataType::kFloat32:
      static_cast<float*>(base)[index] = static_cast<float>(value);
      return;
    case DataType::kFloat64:
      static_cast<double*>(base)[index] = value;
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[index] = static_cast<int32_t>(value);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[index] = static_cast<int64_t>(value);
      return;
    default:
      throw std::logic_error("dtype not used by these tests");
  }
}

double loadValue(DataType dtype, const void* base, size_t index) {
  switch (dtype) {
    case DataType::kFloat32:
      return static_cast<const float*>(base)[index];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[index];
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[index];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[index]);
    default:
      throw std::logic_error("dtype not used by these tests");
  }
}

void fillContribution(
    const Reduction& reduction, int rank, void* data, size_t count, size_t first) {
  for (size_t i = 0; i < count; ++i) {
    storeValue(reduction.dtype, data, i, contribution(reduction.op, rank, first + i));
  }
}

std::string checkReduction(
    const Reduction& reduction, int size, const void* data, size_t count, size_t first) {
  for (size_t i = 0; i < count; ++i) {
    const double want = expectedReduction(reduction.op, size, first + i);
    const double got = loadValue(reduction.dtype, data, i);
    if (got != want) {
      std::ostringstream out;
      out << describe(reduction) << " element " << first + i << ": got " << got << ", want "
          << want;
      return out.str();
    }
  }
  return "";
}

void fillPattern(void* data, size_t block, size_t bytes) {
  auto* out = static_cast<uint8_t*>(data);
  for (size_t j = 0; j < bytes; ++j) out[j] = patternByte(block, j);
}

std::string checkPattern(const void* data, size_t block, size_t bytes) {
  const auto* in = static_cast<const uint8_t*>(data);
  for (size_t j = 0; j < bytes; ++j) {
    if (in[j] != patternByte(block, j)) {
      std::ostringstream out;
      out << "block " << block << " byte " << j << ": got " << int(in[j]) << ", want "
          << int(patternByte(block, j));
      return out.str();
    }
  }
  return "";
}

std::string describe(const Reduction& reduction) {
  return std::string(toString(reduction.dtype)) + "/" + std::string(toString(reduction.op));
}

}  // namespace chorus::algorithms::testing
