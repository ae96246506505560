// Device-side helpers shared by the kernels (not by the host): loads and stores of fp32/bf16 as fp32,
// warp and block reductions with shuffles, grid sizing for grid-stride loops, and a deterministic
// column reduction (bias, norm-weight and embedding-free parameter gradients).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/cuda_check.h"

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
// order, so the result is the same on every run. Block (32, kColumnRows): 32 columns, rows strided. A
// layer's columns alone give too few blocks to fill a GPU (768 columns: 24 blocks of 32 on 132 SMs, each
// reading 8192 rows), so the rows are also split into `parts` chunks: each (column block, chunk) block
// writes its sums to `partial` [parts][cols], and add_column_partials adds the chunks in order.
constexpr int kColumnRows = 16;
template <class F>
__global__ void add_column_sums_kernel(float* out, float* out2, float2* partial, std::int64_t rows, std::int64_t cols,
                                       std::int64_t chunk, F f) {
  __shared__ float2 part[kColumnRows][33];
  const std::int64_t c = blockIdx.x * 32 + threadIdx.x;
  const std::int64_t first = blockIdx.y * chunk, end = first + chunk < rows ? first + chunk : rows;
  float2 sum = make_float2(0.0f, 0.0f);
  if (c < cols)
    for (std::int64_t r = first + threadIdx.y; r < end; r += kColumnRows) {
      const float2 v = f(r, c);
      sum.x += v.x;
      sum.y += v.y;
    }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int y = 1; y < kColumnRows; ++y) {
    sum.x += part[y][threadIdx.x].x;
    sum.y += part[y][threadIdx.x].y;
  }
  if (partial != nullptr) {
    partial[blockIdx.y * cols + c] = sum;
    return;
  }
  out[c] += sum.x;
  if (out2 != nullptr) out2[c] += sum.y;
}

static __global__ void add_column_partials_kernel(float* out, float* out2, const float2* partial, std::int64_t cols,
                                                  int parts) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float2 sum = partial[c];
  for (int p = 1; p < parts; ++p) {
    sum.x += partial[p * cols + c].x;
    sum.y += partial[p * cols + c].y;
  }
  out[c] += sum.x;
  if (out2 != nullptr) out2[c] += sum.y;
}

// Chunks of rows for a column sum: enough blocks for several waves on any GPU Loom runs on (512: 3.9
// waves of 132 SMs), each chunk at least kColumnChunkRows rows (4 per thread), at most kColumnParts.
constexpr std::int64_t kColumnTargetBlocks = 512, kColumnChunkRows = 64, kColumnParts = 64;
inline int column_parts(std::int64_t rows, std::int64_t cols) {
  const std::int64_t col_blocks = (cols + 31) / 32;
  const std::int64_t wanted = (kColumnTargetBlocks + col_blocks - 1) / col_blocks;
  return static_cast<int>(std::clamp<std::int64_t>(std::min(wanted, rows / kColumnChunkRows), 1, kColumnParts));
}

template <class F>
void add_column_sums(float* out, float* out2, std::int64_t rows, std::int64_t cols, F f, cudaStream_t stream) {
  const dim3 block(32, kColumnRows);
  const unsigned col_blocks = static_cast<unsigned>((cols + 31) / 32);
  const int parts = column_parts(rows, cols);
  const std::int64_t chunk = (rows + parts - 1) / parts;
  if (parts == 1) {
    add_column_sums_kernel<<<dim3(col_blocks, 1), block, 0, stream>>>(out, out2, nullptr, rows, cols, chunk, f);
    return;
  }
  // Scratch from the stream-ordered pool, parts × cols float2: about (512 + col_blocks) × 32 of them, at
  // most 256 KiB (132 KiB for 768 columns), freed in stream order behind the kernels that use it; it is not
  // counted by the backend's allocator.
  float2* partial = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), sizeof(float2) * parts * cols, stream));
  add_column_sums_kernel<<<dim3(col_blocks, static_cast<unsigned>(parts)), block, 0, stream>>>(out, out2, partial, rows,
                                                                                               cols, chunk, f);
  add_column_partials_kernel<<<grid_for(cols), kThreads, 0, stream>>>(out, out2, partial, cols, parts);
  CUDA_CHECK(cudaFreeAsync(partial, stream));
}

}  // namespace loom::kernels
