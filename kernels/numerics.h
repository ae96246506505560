// Number formats and counter-based randomness shared by the CPU reference (exec/cpu) and the CUDA
// kernels (kernels/*.cu): bf16 <-> fp32 conversion with round-to-nearest-even, the dropout mask's
// hash of a value's global position, and a context-parallel rank's token positions. Written once as __host__ __device__
// functions, so both backends round and draw masks identically; plain C++ when compiled without nvcc.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif

namespace loom::kernels {

// The bits of a float, without std::bit_cast (not usable in device code with every nvcc).
LOOM_HD std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
LOOM_HD float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// bf16 is the upper half of an IEEE fp32 (1 sign, 8 exponent, 7 mantissa bits). Rounding to nearest,
// ties to even, as __float2bfloat16_rn and PyTorch's .to(torch.bfloat16) do; NaN stays a quiet NaN.
LOOM_HD std::uint16_t bf16_bits_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}
LOOM_HD float float_from_bf16_bits(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }

// SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijective mix of 64 bits.
LOOM_HD std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Dropout keeps value `index` (its global position) of the stream `key` with probability 1 − p: the top
// 24 bits of a hash of (key, index) compared with p·2^24. Depends on the position only, so every
// layout and every backend drops the same values.
LOOM_HD std::uint64_t dropout_threshold(float p) {
  return static_cast<std::uint64_t>(static_cast<double>(p) * 16777216.0);
}
LOOM_HD bool dropout_keep(std::uint64_t key, std::uint64_t index, std::uint64_t threshold) {
  return (mix64(key ^ mix64(index)) >> 40) >= threshold;
}

// Context parallelism with causal load balancing (Megatron-core): each sequence is cut into 2·cp chunks
// and CP rank `rank` holds chunks rank and 2·cp−1−rank, `seq` local tokens in all. The position in its
// sequence of local token t (0 ≤ t < seq): what RoPE, learned positions and the causal mask use.
LOOM_HD int context_parallel_position(int t, int seq, int cp, int rank) {
  if (cp == 1) return t;
  const int chunk = seq / 2, half = t / chunk;
  return (half == 0 ? rank : 2 * cp - 1 - rank) * chunk + t - half * chunk;
}

}  // namespace loom::kernels
