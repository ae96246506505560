// Element-wise math written as plain arithmetic so loops over it vectorise (libm's expf/tanhf are
// opaque calls). Compiled with -fno-trapping-math, which lets the clamps become vector min/max;
// results are the same, bit for bit, on every rank.
#pragma once

#include <bit>
#include <cstdint>

// Always inlined: the AVX2 copies of the kernels that call it (cpu_loops.h) may not inline a function
// compiled for the baseline target otherwise, and a call in the loop stops it vectorising.
#if defined(__GNUC__) || defined(__clang__)
#define LOOM_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define LOOM_ALWAYS_INLINE inline
#endif

namespace loom::exec {

// e^x as 2^n · p(r), r = x − n·ln2 in [−ln2/2, ln2/2], p a degree-6 Taylor polynomial (relative
// error < 2e-7): plain arithmetic, so the compiler vectorises the loops that call it, which it
// cannot do with libm's expf. Clamped to ±87 so 2^n stays a normal float.
LOOM_ALWAYS_INLINE float vector_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 87.0f ? 87.0f : x);
  // Round to nearest by adding and subtracting 1.5·2^23 (no libm call, so it vectorises).
  const float n = (x * 1.4426950408889634f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

}  // namespace loom::exec
