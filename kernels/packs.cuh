// Element-wise kernels that move up to 16 bytes a load and store: a Pack is W consecutive values of one
// type, read or written as one vector access, and `map` runs a per-value function over n values of
// several arrays in packs (8 bf16 or 4 fp32 a thread, the width the widest type allows in 16 bytes)
// where every array is aligned to its pack, one value a thread otherwise and for the tail. A scalar
// load of a bf16 moves 2 bytes per instruction, a fraction of what the memory system delivers per
// request: these ops are bandwidth-bound, and the 2026-11-28 op table had them at several times their
// bytes' time at the H200's bandwidth (docs/gpu-validation.md). `map` rounds every value as the scalar
// kernels it replaced did, so its ops' results are bit for bit theirs.
#pragma once

#include <cstdint>

#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

__device__ __forceinline__ float to_float(std::uint8_t x) { return static_cast<float>(x); }

// x rounded to T and back: the value a kernel that stored an intermediate result in T would read again.
template <class T>
__device__ __forceinline__ float rounded(float x) {
  return to_float(from_float<T>(x));
}

// Values per pack for the given element types: what 16 bytes hold of the widest.
template <class... T>
constexpr int pack_width() {
  std::size_t widest = 1;
  ((widest = sizeof(T) > widest ? sizeof(T) : widest), ...);
  return static_cast<int>(16 / widest);
}

// Whether p may be read as packs of W values of T.
template <class T>
inline bool pack_aligned(const T* p, int w) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * static_cast<std::uintptr_t>(w)) == 0;
}

// Pack `pack` of base (values pack·W … pack·W + W − 1) as fp32, and stored back from fp32.
template <int W, class T>
__device__ __forceinline__ void load_floats(float (&out)[W], const T* base, i64 pack) {
  const Pack<T, W> v = reinterpret_cast<const Pack<T, W>*>(base)[pack];
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = to_float(v.v[k]);
}
template <int W, class T>
__device__ __forceinline__ void store_floats(T* base, i64 pack, const float (&in)[W]) {
  Pack<T, W> v;
#pragma unroll
  for (int k = 0; k < W; ++k) v.v[k] = from_float<T>(in[k]);
  reinterpret_cast<Pack<T, W>*>(base)[pack] = v;
}

// Pack `pack` of each array as fp32, v[a] from arrays[a]: `const auto [x, w] = load_packs<W>(p, xs, ws).v;`
// for an op that reads several arrays at the same positions.
template <int W, int N>
struct FloatPacks {
  float v[N][W];
};
template <int W, class... T>
__device__ __forceinline__ FloatPacks<W, sizeof...(T)> load_packs(i64 pack, const T*... arrays) {
  FloatPacks<W, sizeof...(T)> out;
  int a = 0;
  (load_floats(out.v[a++], arrays, pack), ...);
  return out;
}

// Whether rows of `cols` values, in arrays starting at each pointer, split into whole packs of W (a null
// pointer, an absent operand, never stands in the way).
template <int W, class... P>
bool rows_fill_packs(i64 cols, const P*... p) {
  return cols % W == 0 && (pack_aligned(p, W) && ...);
}

template <int W, class F, class Out, class... In>
__global__ void map_kernel(i64 packs, F f, Out* out, const In*... in) {
  LOOM_GRID_STRIDE(p, packs) {
    Pack<Out, W> o;
    [&](const Pack<In, W>... x) {  // by value: each pack read as one vector load
#pragma unroll
      for (int k = 0; k < W; ++k) o.v[k] = from_float<Out>(f(to_float(x.v[k])...));
    }(reinterpret_cast<const Pack<In, W>*>(in)[p]...);
    reinterpret_cast<Pack<Out, W>*>(out)[p] = o;
  }
}

// out[i] = f(in[i]...) in fp32 for i < n, rounded to Out; `out` may be one of the inputs (each thread
// reads its values before it writes them). F is a functor with a __device__ float operator()(float...).
template <class F, class Out, class... In>
void map(i64 n, F f, cudaStream_t stream, Out* out, const In*... in) {
  if (n == 0) return;
  constexpr int W = pack_width<Out, In...>();
  i64 done = 0;
  if (n >= W && pack_aligned(out, W) && (pack_aligned(in, W) && ...)) {
    const i64 packs = n / W;
    map_kernel<W><<<grid_for(packs), kThreads, 0, stream>>>(packs, f, out, in...);
    CUDA_CHECK_LAUNCH();
    done = packs * W;
  }
  if (done < n) {
    map_kernel<1><<<grid_for(n - done), kThreads, 0, stream>>>(n - done, f, out + done, (in + done)...);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace loom::kernels
