// Check patterns and closed forms for chorus-bench (see patterns.h).
#include "patterns.h"

#include <algorithm>
#include <cmath>
#include <complex>

#include "core/half.h"

namespace chorus::bench {
namespace {

// How one dtype is stored and converted to and from double. Integers convert through int64 so a
// wrapped reference folds the same way the kernels do (modular, as C++20 defines the conversion).
template <typename T>
struct IntegerCodec {
  using Storage = T;
  static double load(Storage value) { return static_cast<double>(value); }
  static Storage store(double value) { return static_cast<T>(static_cast<int64_t>(value)); }
};
template <typename T>
struct FloatCodec {
  using Storage = T;
  static double load(Storage value) { return value; }
  static Storage store(double value) { return static_cast<T>(value); }
};
struct Float16Codec {
  using Storage = uint16_t;
  static double load(Storage value) { return half::float16ToFloat(value); }
  static Storage store(double value) { return half::floatToFloat16(static_cast<float>(value)); }
};
struct BFloat16Codec {
  using Storage = uint16_t;
  static double load(Storage value) { return half::bfloat16ToFloat(value); }
  static Storage store(double value) { return half::floatToBfloat16(static_cast<float>(value)); }
};
// Complex values carry the pattern in the real part; a non-zero imaginary part reads as NaN, which
// no check accepts.
template <typename T>
struct ComplexCodec {
  using Storage = std::complex<T>;
  static double load(Storage value) { return value.imag() == 0 ? value.real() : std::nan(""); }
  static Storage store(double value) { return {static_cast<T>(value), T{0}}; }
};
// chorus writes bool results as 0 or 1, so any other byte read back counts as wrong.
struct BoolCodec {
  using Storage = uint8_t;
  static double load(Storage value) { return value; }
  static Storage store(double value) { return value != 0.0 ? 1 : 0; }
};

// The one place that dispatches on DataType: calls fn with the dtype's codec.
template <typename Fn>
decltype(auto) visitDataType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat16:
      return fn(Float16Codec{});
    case DataType::kBFloat16:
      return fn(BFloat16Codec{});
    case DataType::kFloat32:
      return fn(FloatCodec<float>{});
    case DataType::kFloat64:
      return fn(FloatCodec<double>{});
    case DataType::kInt8:
      return fn(IntegerCodec<int8_t>{});
    case DataType::kUInt8:
      return fn(IntegerCodec<uint8_t>{});
    case DataType::kInt32:
      return fn(IntegerCodec<int32_t>{});
    case DataType::kInt64:
      return fn(IntegerCodec<int64_t>{});
    case DataType::kBool:
      return fn(BoolCodec{});
    case DataType::kInt16:
      return fn(IntegerCodec<int16_t>{});
    case DataType::kUInt16:
      return fn(IntegerCodec<uint16_t>{});
    case DataType::kUInt32:
      return fn(IntegerCodec<uint32_t>{});
    case DataType::kUInt64:
      return fn(IntegerCodec<uint64_t>{});
    case DataType::kComplex64:
      return fn(ComplexCodec<float>{});
    case DataType::kComplex128:
      return fn(ComplexCodec<double>{});
  }
  return fn(FloatCodec<float>{});  // Unreachable: every enumerator is handled above.
}

// The value as the dtype stores it.
double roundTrip(DataType dtype, double value) {
  return visitDataType(dtype, [&](auto codec) { return codec.load(codec.store(value)); });
}

double foldBool(ReduceOp op, DataType dtype, int ranks, int64_t index) {
  int trues = 0;
  for (int r = 0; r < ranks; ++r) {
    trues += reducedValue(op, dtype, r, index) != 0.0 ? 1 : 0;
  }
  switch (op) {
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return trues == ranks ? 1.0 : 0.0;
    case ReduceOp::kBxor:
      return trues % 2;
    default:  // sum, max, bor: "or" (avg is not defined on bool).
      return trues > 0 ? 1.0 : 0.0;
  }
}

int64_t foldInteger(ReduceOp op, DataType dtype, int ranks, int64_t index) {
  int64_t acc = static_cast<int64_t>(reducedValue(op, dtype, 0, index));
  for (int r = 1; r < ranks; ++r) {
    auto value = static_cast<int64_t>(reducedValue(op, dtype, r, index));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += value;
        break;
      case ReduceOp::kProd:
        acc *= value;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, value);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, value);
        break;
      case ReduceOp::kBand:
        acc &= value;
        break;
      case ReduceOp::kBor:
        acc |= value;
        break;
      case ReduceOp::kBxor:
        acc ^= value;
        break;
    }
  }
  return op == ReduceOp::kAvg ? acc / ranks : acc;
}

double foldFloat(ReduceOp op, DataType dtype, int ranks, int64_t index) {
  double acc = reducedValue(op, dtype, 0, index);
  for (int r = 1; r < ranks; ++r) {
    double value = reducedValue(op, dtype, r, index);
    switch (op) {
      case ReduceOp::kProd:
        acc *= value;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, value);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, value);
        break;
      default:  // sum and avg (bitwise ops are refused on float types before any call).
        acc += value;
        break;
    }
  }
  return op == ReduceOp::kAvg ? acc / ranks : acc;
}

}  // namespace

double movedValue(int rank, int64_t index) {
  return static_cast<double>((int64_t{rank} * 31 + index * 7) % 97);
}

double reducedValue(ReduceOp op, DataType dtype, int rank, int64_t index) {
  if (dtype == DataType::kBool) {
    return (rank + index) % 3 != 0 ? 1.0 : 0.0;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<double>((rank + index) % 4);
    case ReduceOp::kProd:
      return (rank + index) % 4 == 0 ? 2.0 : 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((int64_t{rank} * 5 + index * 3) % 11);
    default:  // band, bor, bxor
      return static_cast<double>((int64_t{rank} * 37 + index * 11) % 128);
  }
}

double reducedExpected(ReduceOp op, DataType dtype, int ranks, int64_t index) {
  if (dtype == DataType::kBool) {
    return foldBool(op, dtype, ranks, index);
  }
  if (!isFloatingPoint(dtype) && !isComplex(dtype)) {
    return roundTrip(dtype, static_cast<double>(foldInteger(op, dtype, ranks, index)));
  }
  return foldFloat(op, dtype, ranks, index);
}

double toleranceFor(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 1e-2;
    case DataType::kFloat32:
    case DataType::kComplex64:
      return 1e-5;
    case DataType::kFloat64:
    case DataType::kComplex128:
      return 1e-12;
    default:
      return 0.0;
  }
}

void fillBuffer(DataType dtype,
                void* data,
                int64_t count,
                const std::function<double(int64_t)>& value) {
  visitDataType(dtype, [&](auto codec) {
    auto* out = static_cast<typename decltype(codec)::Storage*>(data);
    for (int64_t i = 0; i < count; ++i) {
      out[i] = codec.store(value(i));
    }
  });
}

int64_t countMismatches(DataType dtype,
                        const void* data,
                        int64_t count,
                        const std::function<double(int64_t)>& expected) {
  const double tolerance = toleranceFor(dtype);
  return visitDataType(dtype, [&](auto codec) {
    const auto* in = static_cast<const typename decltype(codec)::Storage*>(data);
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      double want = expected(i);
      double got = codec.load(in[i]);
      double exact = codec.load(codec.store(want));
      bool ok = tolerance == 0.0
                    ? got == exact
                    : std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want));
      wrong += ok ? 0 : 1;
    }
    return wrong;
  });
}

}  // namespace chorus::bench
