// Element-wise reduction kernels (see reduce_kernels.h): one typed, vectorized loop per
// (operator, storage format, instruction set), chosen from a table built once.
//
// Cost: every kernel is a streaming pass, so it runs at memory bandwidth for large counts.
// reduceMany reads each source once and writes dst once: with three or more sources it works in
// blocks small enough for L1 (8 KiB of elements, or 512 floats for the half types), so intermediate
// results never leave the cache. float16/bfloat16 are widened block by block into float32 buffers
// on the stack, combined there across all sources, and rounded once when narrowed back.
//
// Semantics beyond reduce_kernels.h: integer sum and prod wrap around (two's complement); float
// min and max propagate NaN (if either operand is NaN the result is NaN, unlike std::min/fmin), and
// for operands that compare equal (+0, -0) return the later source's; bool treats any non-zero
// byte as true and writes 0 or 1. Sources are combined in index order, so every rank that reduces
// the same buffers in the same order gets bit-identical results.
//
// Limits: buffers may be identical (dst == a source) but must not partially overlap. Integer avg
// division is scalar (it runs once per collective, after the reduction).
//
// Note [Kernel instruction sets]
// Each kernel entry point is compiled twice from the same always_inline loop bodies: once for the
// baseline target (SSE2 on x86-64) and once under __attribute__((target("avx2,f16c"))). The loops
// are inlined into the entry, so the vectorizer sees the entry's instruction set; no -march flag is
// needed and the library still runs on any x86-64. The table picks the AVX2 column when
// __builtin_cpu_supports says so. float16 conversion is the one place the variants differ in code
// (F16C instructions vs. integer/float bit tricks); both round to nearest even and treat NaN the
// same way, and the tests check them against each other for every input class, so results never
// depend on which CPU a rank runs on. Floating-point contraction is never enabled (no fma target),
// so a + b is the same correctly rounded sum everywhere.
#include "core/reduce_kernels.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "core/check.h"
#include "core/reduce_kernels_isa.h"
#include "core/reduce_kernels_loops.h"

namespace chorus::kernels {
namespace detail {
namespace {

using ReduceManyFn = void (*)(void* dst, const void* const* srcs, size_t numSrcs, size_t count);
using DivideFn = void (*)(void* data, size_t count, int64_t divisor);
using WidenFn = void (*)(const void* src, float* dst, size_t count);
using NarrowFn = void (*)(const float* src, void* dst, size_t count);

constexpr size_t kHalfBlock = 512;    // floats per block for float16/bfloat16
constexpr size_t kBlockBytes = 8192;  // bytes per block for the other types

// float16/bfloat16, numSrcs >= 2: widen each source block to float, combine, narrow once.
template <typename Op, typename Format, typename Isa>
CHORUS_ALWAYS_INLINE void reduceManyHalf(void* dstRaw,
                                         const void* const* srcs,
                                         size_t numSrcs,
                                         size_t count) {
  auto* dst = static_cast<uint16_t*>(dstRaw);
  alignas(64) float acc[kHalfBlock];
  alignas(64) float widened[kHalfBlock];
  for (size_t begin = 0; begin < count; begin += kHalfBlock) {
    size_t n = std::min(kHalfBlock, count - begin);
    Format::template widen<Isa>(static_cast<const uint16_t*>(srcs[0]) + begin, acc, n);
    for (size_t k = 1; k < numSrcs; ++k) {
      Format::template widen<Isa>(static_cast<const uint16_t*>(srcs[k]) + begin, widened, n);
      combineInto<Op>(acc, widened, n);
    }
    Format::template narrow<Isa>(acc, dst + begin, n);
  }
}

template <typename T>
CHORUS_ALWAYS_INLINE const T* sourceAt(const void* const* srcs, size_t k, size_t begin) {
  return static_cast<const T*>(srcs[k]) + begin;
}

// Other types, numSrcs >= 2. Sources are combined in order: ((s0 op s1) op s2) ...
template <typename Op, typename T>
CHORUS_ALWAYS_INLINE void reduceManyPlain(void* dstRaw,
                                          const void* const* srcs,
                                          size_t numSrcs,
                                          size_t count) {
  constexpr size_t kBlock = kBlockBytes / sizeof(T);
  auto* dst = static_cast<T*>(dstRaw);
  bool dstIsLaterSource = false;
  for (size_t k = 1; k < numSrcs; ++k) {
    dstIsLaterSource |= srcs[k] == dstRaw;
  }
  if (!dstIsLaterSource) {
    // Accumulate straight into dst (which may be srcs[0]); two sources need no blocking.
    size_t block = numSrcs == 2 ? count : kBlock;
    for (size_t begin = 0; begin < count; begin += block) {
      size_t n = std::min(block, count - begin);
      if (srcs[0] == dstRaw) {
        combineInto<Op>(dst + begin, sourceAt<T>(srcs, 1, begin), n);
      } else {
        combine<Op>(dst + begin, sourceAt<T>(srcs, 0, begin), sourceAt<T>(srcs, 1, begin), n);
      }
      for (size_t k = 2; k < numSrcs; ++k) {
        combineInto<Op>(dst + begin, sourceAt<T>(srcs, k, begin), n);
      }
    }
    return;
  }
  // dst is also a later source: accumulate a block on the stack, then store it.
  alignas(64) T acc[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    size_t n = std::min(kBlock, count - begin);
    combine<Op>(acc, sourceAt<T>(srcs, 0, begin), sourceAt<T>(srcs, 1, begin), n);
    for (size_t k = 2; k < numSrcs; ++k) {
      combineInto<Op>(acc, sourceAt<T>(srcs, k, begin), n);
    }
    std::memcpy(dst + begin, acc, n * sizeof(T));
  }
}

template <typename Op, typename Format, typename Isa>
CHORUS_ALWAYS_INLINE void reduceManyBody(void* dst,
                                         const void* const* srcs,
                                         size_t numSrcs,
                                         size_t count) {
  if constexpr (Format::kIsHalf) {
    reduceManyHalf<Op, Format, Isa>(dst, srcs, numSrcs, count);
  } else {
    reduceManyPlain<Op, typename Format::Storage>(dst, srcs, numSrcs, count);
  }
}

// data[i] /= divisor. Floats divide in double and round once: the quotient of a float (or half)
// by an integer below 2^53 is then correctly rounded (double has >= 2p + 2 bits for p <= 24).
template <typename Format, typename Isa>
CHORUS_ALWAYS_INLINE void divideBody(void* dataRaw, size_t count, int64_t divisor) {
  const double divisorF = static_cast<double>(divisor);
  if constexpr (Format::kIsHalf) {
    auto* data = static_cast<uint16_t*>(dataRaw);
    alignas(64) float block[kHalfBlock];
    for (size_t begin = 0; begin < count; begin += kHalfBlock) {
      size_t n = std::min(kHalfBlock, count - begin);
      Format::template widen<Isa>(data + begin, block, n);
      for (size_t i = 0; i < n; ++i) {
        block[i] = static_cast<float>(static_cast<double>(block[i]) / divisorF);
      }
      Format::template narrow<Isa>(block, data + begin, n);
    }
  } else {
    using T = typename Format::Storage;
    T* __restrict data = static_cast<T*>(dataRaw);
    for (size_t i = 0; i < count; ++i) {
      if constexpr (kIsComplex<T>) {
        using F = decltype(data[i].re);
        data[i] = {static_cast<F>(static_cast<double>(data[i].re) / divisorF),
                   static_cast<F>(static_cast<double>(data[i].im) / divisorF)};
      } else if constexpr (std::is_unsigned_v<T>) {
        data[i] = static_cast<T>(static_cast<uint64_t>(data[i]) / static_cast<uint64_t>(divisor));
      } else if constexpr (std::is_integral_v<T>) {
        data[i] = static_cast<T>(static_cast<int64_t>(data[i]) / divisor);  // truncates toward 0
      } else {
        data[i] = static_cast<T>(static_cast<double>(data[i]) / divisorF);
      }
    }
  }
}

// One entry point per instruction set; see Note [Kernel instruction sets].
template <typename Op, typename Format>
struct ReduceEntry {
  static void generic(void* dst, const void* const* srcs, size_t numSrcs, size_t count) {
    reduceManyBody<Op, Format, GenericIsa>(dst, srcs, numSrcs, count);
  }
  CHORUS_TARGET_AVX2 static void avx2(void* dst,
                                      const void* const* srcs,
                                      size_t numSrcs,
                                      size_t count) {
    reduceManyBody<Op, Format, Avx2Isa>(dst, srcs, numSrcs, count);
  }
};

template <typename Format>
struct FormatEntry {
  static void divideGeneric(void* data, size_t count, int64_t divisor) {
    divideBody<Format, GenericIsa>(data, count, divisor);
  }
  CHORUS_TARGET_AVX2 static void divideAvx2(void* data, size_t count, int64_t divisor) {
    divideBody<Format, Avx2Isa>(data, count, divisor);
  }
  static void widenGeneric(const void* src, float* dst, size_t count) {
    Format::template widen<GenericIsa>(static_cast<const uint16_t*>(src), dst, count);
  }
  CHORUS_TARGET_AVX2 static void widenAvx2(const void* src, float* dst, size_t count) {
    Format::template widen<Avx2Isa>(static_cast<const uint16_t*>(src), dst, count);
  }
  static void narrowGeneric(const float* src, void* dst, size_t count) {
    Format::template narrow<GenericIsa>(src, static_cast<uint16_t*>(dst), count);
  }
  CHORUS_TARGET_AVX2 static void narrowAvx2(const float* src, void* dst, size_t count) {
    Format::template narrow<Avx2Isa>(src, static_cast<uint16_t*>(dst), count);
  }
};

using ReduceColumn = std::array<ReduceManyFn, kNumIsas>;  // indexed by Isa

template <typename Op, typename Format>
constexpr ReduceColumn entriesOf() {
  return {&ReduceEntry<Op, Format>::generic, &ReduceEntry<Op, Format>::avx2};
}

// The (op, format) instantiation; empty where the op is undefined on the type.
template <typename Format>
ReduceColumn selectForFormat(ReduceOp op) {
  constexpr bool kOrdered = !kIsComplex<typename Format::Compute>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return entriesOf<SumOp, Format>();
    case ReduceOp::kProd:
      return entriesOf<ProdOp, Format>();
    case ReduceOp::kMin:
      if constexpr (kOrdered)
        return entriesOf<MinOp, Format>();
      break;
    case ReduceOp::kMax:
      if constexpr (kOrdered)
        return entriesOf<MaxOp, Format>();
      break;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<typename Format::Compute>) {
        if (op == ReduceOp::kBand) {
          return entriesOf<BandOp, Format>();
        }
        return op == ReduceOp::kBor ? entriesOf<BorOp, Format>() : entriesOf<BxorOp, Format>();
      }
      break;
  }
  return {};
}

ReduceColumn selectForBool(ReduceOp op) {
  using Format = Plain<uint8_t>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return entriesOf<BoolOrOp, Format>();
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return entriesOf<BoolAndOp, Format>();
    case ReduceOp::kBxor:
      return entriesOf<BoolXorOp, Format>();
    case ReduceOp::kAvg:
      break;
  }
  return {};
}

// The single dispatch on (ReduceOp, DataType).
ReduceColumn selectReduce(ReduceOp op, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return selectForFormat<Float16>(op);
    case DataType::kBFloat16:
      return selectForFormat<BFloat16>(op);
    case DataType::kFloat32:
      return selectForFormat<Plain<float>>(op);
    case DataType::kFloat64:
      return selectForFormat<Plain<double>>(op);
    case DataType::kInt8:
      return selectForFormat<Plain<int8_t>>(op);
    case DataType::kUInt8:
      return selectForFormat<Plain<uint8_t>>(op);
    case DataType::kInt32:
      return selectForFormat<Plain<int32_t>>(op);
    case DataType::kInt64:
      return selectForFormat<Plain<int64_t>>(op);
    case DataType::kBool:
      return selectForBool(op);
    case DataType::kInt16:
      return selectForFormat<Plain<int16_t>>(op);
    case DataType::kUInt16:
      return selectForFormat<Plain<uint16_t>>(op);
    case DataType::kUInt32:
      return selectForFormat<Plain<uint32_t>>(op);
    case DataType::kUInt64:
      return selectForFormat<Plain<uint64_t>>(op);
    case DataType::kComplex64:
      return selectForFormat<Plain<Complex<float>>>(op);
    case DataType::kComplex128:
      return selectForFormat<Plain<Complex<double>>>(op);
  }
  return {};
}

std::array<DivideFn, kNumIsas> selectDivide(DataType dtype) {
  auto column = [](auto format) -> std::array<DivideFn, kNumIsas> {
    using Entry = FormatEntry<decltype(format)>;
    return {&Entry::divideGeneric, &Entry::divideAvx2};
  };
  switch (dtype) {
    case DataType::kFloat16:
      return column(Float16{});
    case DataType::kBFloat16:
      return column(BFloat16{});
    case DataType::kFloat32:
      return column(Plain<float>{});
    case DataType::kFloat64:
      return column(Plain<double>{});
    case DataType::kInt8:
      return column(Plain<int8_t>{});
    case DataType::kUInt8:
      return column(Plain<uint8_t>{});
    case DataType::kInt32:
      return column(Plain<int32_t>{});
    case DataType::kInt64:
      return column(Plain<int64_t>{});
    case DataType::kInt16:
      return column(Plain<int16_t>{});
    case DataType::kUInt16:
      return column(Plain<uint16_t>{});
    case DataType::kUInt32:
      return column(Plain<uint32_t>{});
    case DataType::kUInt64:
      return column(Plain<uint64_t>{});
    case DataType::kComplex64:
      return column(Plain<Complex<float>>{});
    case DataType::kComplex128:
      return column(Plain<Complex<double>>{});
    case DataType::kBool:
      break;
  }
  return {};
}

struct KernelTable {
  ReduceColumn reduce[kNumReduceOps][kNumDataTypes];
  std::array<DivideFn, kNumIsas> divide[kNumDataTypes];
};

const KernelTable& kernelTable() {
  static const KernelTable table = [] {
    KernelTable built{};
    for (int d = 0; d < kNumDataTypes; ++d) {
      for (int o = 0; o < kNumReduceOps; ++o) {
        built.reduce[o][d] = selectReduce(static_cast<ReduceOp>(o), static_cast<DataType>(d));
      }
      built.divide[d] = selectDivide(static_cast<DataType>(d));
    }
    return built;
  }();
  return table;
}

bool cpuHasAvx2() {
#if CHORUS_KERNELS_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

std::atomic<int> isaOverride{-1};

int isaIndex() { return static_cast<int>(activeIsa()); }

ReduceManyFn lookupReduce(ReduceOp op, DataType dtype) {
  CHORUS_CHECK_ARG(isValidReduction(op, dtype), "reduce op ", toString(op),
                   " is not defined on dtype ", toString(dtype),
                   "; band, bor and bxor need an integer or bool dtype, min and max a non-complex "
                   "one, and avg a non-bool one");
  ReduceManyFn fn = kernelTable().reduce[static_cast<int>(op)][static_cast<int>(dtype)][isaIndex()];
  CHORUS_ASSERT(fn != nullptr);
  return fn;
}

void checkHalfType(DataType dtype, const char* what) {
  CHORUS_CHECK_ARG(dtype == DataType::kFloat16 || dtype == DataType::kBFloat16, what,
                   " converts float16 or bfloat16 only, not ", toString(dtype));
}

}  // namespace
}  // namespace detail

bool isaSupported(Isa isa) {
  static const bool hasAvx2 = detail::cpuHasAvx2();
  return isa == Isa::kGeneric || (isa == Isa::kAvx2 && hasAvx2);
}

Isa activeIsa() {
  int forced = detail::isaOverride.load(std::memory_order_relaxed);
  if (forced >= 0) {
    return static_cast<Isa>(forced);
  }
  static const Isa best = isaSupported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kGeneric;
  return best;
}

void overrideIsa(std::optional<Isa> isa) {
  CHORUS_CHECK_ARG(!isa || isaSupported(*isa), "this CPU cannot run the ", toString(*isa),
                   " kernels");
  detail::isaOverride.store(isa ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
}

const char* toString(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "generic"; }

void reduceInto(ReduceOp op, DataType dtype, void* dst, const void* src, size_t count) {
  const void* srcs[2] = {dst, src};
  reduceMany(op, dtype, dst, srcs, count);
}

void reduceMany(
    ReduceOp op, DataType dtype, void* dst, std::span<const void* const> srcs, size_t count) {
  auto fn = detail::lookupReduce(op, dtype);
  CHORUS_CHECK_ARG(!srcs.empty(), "reduceMany needs at least one source buffer");
  if (count == 0) {
    return;
  }
  CHORUS_CHECK_ARG(dst != nullptr, "reduce of ", count, " elements into a null buffer");
  for (const void* src : srcs) {
    CHORUS_CHECK_ARG(src != nullptr, "reduce of ", count, " elements from a null buffer");
  }
  if (srcs.size() == 1) {
    if (dst != srcs[0]) {
      std::memmove(dst, srcs[0], count * dataTypeSize(dtype));
    }
    return;
  }
  fn(dst, srcs.data(), srcs.size(), count);
}

void divideBy(DataType dtype, void* data, size_t count, int64_t divisor) {
  CHORUS_CHECK_ARG(isValidReduction(ReduceOp::kAvg, dtype), "avg is not defined on dtype ",
                   toString(dtype));
  CHORUS_CHECK_ARG(divisor > 0, "divideBy needs a positive divisor, got ", divisor);
  if (count == 0 || divisor == 1) {
    return;
  }
  CHORUS_CHECK_ARG(data != nullptr, "divide of ", count, " elements in a null buffer");
  detail::kernelTable().divide[static_cast<int>(dtype)][detail::isaIndex()](data, count, divisor);
}

void widenToFloat32(DataType dtype, const void* src, float* dst, size_t count) {
  detail::checkHalfType(dtype, "widenToFloat32");
  bool avx2 = activeIsa() == Isa::kAvx2;
  if (dtype == DataType::kFloat16) {
    using Entry = detail::FormatEntry<detail::Float16>;
    (avx2 ? Entry::widenAvx2 : Entry::widenGeneric)(src, dst, count);
  } else {
    using Entry = detail::FormatEntry<detail::BFloat16>;
    (avx2 ? Entry::widenAvx2 : Entry::widenGeneric)(src, dst, count);
  }
}

namespace {

template <typename T>
void widenLoop(const void* src, int64_t* dst, size_t count) {
  const T* from = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) dst[i] = from[i];
}

template <typename T>
void narrowLoop(const int64_t* src, void* dst, size_t count) {
  T* to = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) to[i] = static_cast<T>(src[i]);
}

}  // namespace

void widenToInt64(DataType dtype, const void* src, int64_t* dst, size_t count) {
  switch (dtype) {
    case DataType::kInt8:
      return widenLoop<int8_t>(src, dst, count);
    case DataType::kUInt8:
      return widenLoop<uint8_t>(src, dst, count);
    case DataType::kInt16:
      return widenLoop<int16_t>(src, dst, count);
    case DataType::kUInt16:
      return widenLoop<uint16_t>(src, dst, count);
    case DataType::kInt32:
      return widenLoop<int32_t>(src, dst, count);
    case DataType::kUInt32:
      return widenLoop<uint32_t>(src, dst, count);
    default:
      CHORUS_CHECK_ARG(false, "widenToInt64: ", toString(dtype),
                       " is not an integer type below "
                       "64 bits");
  }
}

void narrowFromInt64(DataType dtype, const int64_t* src, void* dst, size_t count) {
  switch (dtype) {
    case DataType::kInt8:
      return narrowLoop<int8_t>(src, dst, count);
    case DataType::kUInt8:
      return narrowLoop<uint8_t>(src, dst, count);
    case DataType::kInt16:
      return narrowLoop<int16_t>(src, dst, count);
    case DataType::kUInt16:
      return narrowLoop<uint16_t>(src, dst, count);
    case DataType::kInt32:
      return narrowLoop<int32_t>(src, dst, count);
    case DataType::kUInt32:
      return narrowLoop<uint32_t>(src, dst, count);
    default:
      CHORUS_CHECK_ARG(false, "narrowFromInt64: ", toString(dtype),
                       " is not an integer type below "
                       "64 bits");
  }
}

void narrowFromFloat32(DataType dtype, const float* src, void* dst, size_t count) {
  detail::checkHalfType(dtype, "narrowFromFloat32");
  bool avx2 = activeIsa() == Isa::kAvx2;
  if (dtype == DataType::kFloat16) {
    using Entry = detail::FormatEntry<detail::Float16>;
    (avx2 ? Entry::narrowAvx2 : Entry::narrowGeneric)(src, dst, count);
  } else {
    using Entry = detail::FormatEntry<detail::BFloat16>;
    (avx2 ? Entry::narrowAvx2 : Entry::narrowGeneric)(src, dst, count);
  }
}

}  // namespace chorus::kernels
