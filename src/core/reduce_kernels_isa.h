// Which instruction-set variant of the reduction kernels runs (see reduce_kernels.h).
//
// Every kernel is compiled twice: kGeneric for baseline x86-64 (SSE2; also every non-x86 build) and
// kAvx2 (AVX2 + F16C; Haswell / Zen and later). The best variant the CPU supports is chosen once,
// at first use. Both variants give bit-identical results, so ranks on different CPUs agree.
// overrideIsa() exists so tests and benchmarks can run the generic path on an AVX2 machine.
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>

namespace chorus::kernels {

enum class Isa : uint8_t { kGeneric, kAvx2 };
inline constexpr int kNumIsas = 2;

// True when this CPU (and OS) can run `isa`.
bool isaSupported(Isa isa);
// The variant the kernels use now.
Isa activeIsa();
// Forces `isa` (InvalidArgumentError when unsupported); std::nullopt restores the automatic choice.
void overrideIsa(std::optional<Isa> isa);
// "generic" or "avx2".
const char* toString(Isa isa);

}  // namespace chorus::kernels
