// Device-side helpers shared by the kernels (not by the host): loads and stores of fp32/bf16 as fp32,
// warp and block reductions with shuffles, grid sizing for grid-stride loops, and a deterministic
// column reduction (bias, norm-weight and embedding-free parameter gradients).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

namespace loom::kernels {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, offset);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, offset));
  return x;
}

// Sum (max) over the whole block; every thread gets the result. blockDim.x a multiple of 32, ≤ 1024.
// `shared` holds 32 values; the trailing barrier lets the caller reuse it at once.
__device__ __forceinline__ float block_sum(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = warp_sum(lane < warps ? shared[lane] : 0.0f);
  __syncthreads();
  return x;
}
__device__ __forceinline__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = warp_max(lane < warps ? shared[lane] : -FLT_MAX);
  __syncthreads();
  return x;
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, capped so the grid stays legal.
inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65536));
}

#define LOOM_GRID_STRIDE(i, n)                                                                     \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// out[c] += Σ_r f(r, c).x (and out2[c] += Σ_r f(r, c).y when out2 is given), summed in fp32 in a fixed
// order, so the result is the same on every run. Block (32, kColumnRows): 32 columns, rows strided.
constexpr int kColumnRows = 16;
template <class F>
__global__ void add_column_sums_kernel(float* out, float* out2, std::int64_t rows, std::int64_t cols, F f) {
  __shared__ float2 partial[kColumnRows][33];
  const std::int64_t c = blockIdx.x * 32 + threadIdx.x;
  float2 sum = make_float2(0.0f, 0.0f);
  if (c < cols)
    for (std::int64_t r = threadIdx.y; r < rows; r += kColumnRows) {
      const float2 v = f(r, c);
      sum.x += v.x;
      sum.y += v.y;
    }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int y = 1; y < kColumnRows; ++y) {
    sum.x += partial[y][threadIdx.x].x;
    sum.y += partial[y][threadIdx.x].y;
  }
  out[c] += sum.x;
  if (out2 != nullptr) out2[c] += sum.y;
}

template <class F>
void add_column_sums(float* out, float* out2, std::int64_t rows, std::int64_t cols, F f, cudaStream_t stream) {
  const dim3 block(32, kColumnRows);
  const unsigned grid = static_cast<unsigned>((cols + 31) / 32);
  add_column_sums_kernel<<<grid, block, 0, stream>>>(out, out2, rows, cols, f);
}

}  // namespace loom::kernels
