// How the CPU backend's element-wise and reduction loops use the machine: one OpenMP team (the BLAS
// shares it, exec/CMakeLists.txt) over fixed chunks, and a second copy of each hot kernel compiled for
// AVX2 + FMA that the loader picks on CPUs that have them (GCC/Clang function multiversioning, as
// PyTorch's ATen dispatches per CPU capability). The build itself targets baseline x86-64, so the binary
// runs anywhere.
//
// Chunks are fixed in size, not one per thread, and reductions combine per-chunk partials in chunk
// order: a result does not depend on the thread count (on one machine it is the same bit for bit
// whatever --threads is).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

// Not under AddressSanitizer: the clones' resolvers run before its runtime starts.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_CPU_NO_CLONES
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define LOOM_CPU_NO_CLONES
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LOOM_CPU_NO_CLONES)
#define LOOM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOM_CPU_CLONES
#endif

namespace loom::exec {

// Elements per chunk of an element-wise loop, and the size below which a loop stays on one thread
// (waking the team costs more than 64 Ki floats take).
constexpr std::int64_t kChunk = 1 << 14;
constexpr std::int64_t kParallelWork = 1 << 16;

inline std::int64_t chunk_count(std::int64_t n, std::int64_t chunk = kChunk) { return (n + chunk - 1) / chunk; }

// f(begin, end, block index) over [0, n) in blocks of `block`, on the OpenMP team when the loop's
// `work` (values touched) is large enough.
template <class F>
void for_blocks(std::int64_t n, std::int64_t block, std::int64_t work, F&& f) {
  const std::int64_t blocks = chunk_count(n, block);
  [[maybe_unused]] const bool parallel = blocks > 1 && work > kParallelWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t c = 0; c < blocks; ++c) f(c * block, std::min(n, (c + 1) * block), c);
}

// The same over n values in chunks of kChunk.
template <class F>
void for_chunks(std::int64_t n, F&& f) {
  for_blocks(n, kChunk, n, std::forward<F>(f));
}

}  // namespace loom::exec
