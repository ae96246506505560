// Causal softmax for the unfused attention path: in place over rows of scores (already scaled by
// 1/√d), columns past the row's position zeroed; the backward dS = P·(dP − Σ P·dP). fp32 statistics.
// Rows of up to 2048 bf16 (1024 fp32) scores run a warp per row, the row read once into registers by
// 16-byte loads and written once; longer rows (or unaligned views) a block per row, which reads the row
// up to three times, one value a thread, and waits at four block barriers a row. On an H200 GPT-2 small's
// "qk softmax" op (score GEMMs, this softmax over 8 × 12 × 1024 rows of 1024 bf16, the dropout mask and
// its application) took 1.67 ms a layer where its bytes take about 0.3 ms (2026-11-28,
// docs/gpu-validation.md); the block kernel is the likeliest cost by its structure, not yet by measurement.
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {

constexpr int kRowsPerBlock = 8;  // warps (rows) per block of the warp kernels
constexpr int kMaxChunks = 8;     // 16-byte loads per lane and row: rows of up to 32·8 loads

// kVec values of a row starting at j0 (j0 a multiple of kVec, the row 16-byte aligned), those at or past
// `valid` replaced by `fill`.
template <class T, int kVec>
struct alignas(16) Pack {
  T v[kVec];
};
template <class T, int kVec>
__device__ __forceinline__ void load_chunk(float (&x)[kVec], const T* row, int j0, int valid, float fill) {
  if (j0 < valid) {
    const Pack<T, kVec> pk = *reinterpret_cast<const Pack<T, kVec>*>(row + j0);
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = j0 + e < valid ? to_float(pk.v[e]) : fill;
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = fill;
  }
}
template <class T, int kVec>
__device__ __forceinline__ void store_chunk(T* row, int j0, const float (&x)[kVec]) {
  Pack<T, kVec> pk;
#pragma unroll
  for (int e = 0; e < kVec; ++e) pk.v[e] = from_float<T>(x[e]);
  *reinterpret_cast<Pack<T, kVec>*>(row + j0) = pk;
}

// A warp per row; lane l holds the row's loads l, l + 32, ... (each kVec values): coalesced.
template <class T, int kVec, int kChunks>
__global__ void __launch_bounds__(kRowsPerBlock * 32) causal_softmax_forward_rows_kernel(T* scores, i64 rows, int seq) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp: r is the same on every lane
  const int lane = threadIdx.x % 32, valid = static_cast<int>(r % seq) + 1;
  T* row = scores + r * seq;
  float x[kChunks][kVec];
  float mx = -FLT_MAX;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    load_chunk<T, kVec>(x[c], row, (c * 32 + lane) * kVec, valid, -FLT_MAX);
#pragma unroll
    for (int e = 0; e < kVec; ++e) mx = fmaxf(mx, x[c][e]);
  }
  mx = warp_max(mx);
  float sum = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      x[c][e] = (c * 32 + lane) * kVec + e < valid ? expf(x[c][e] - mx) : 0.0f;
      sum += x[c][e];
    }
  const float inv = 1.0f / warp_sum(sum);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int j0 = (c * 32 + lane) * kVec;
    if (j0 >= seq) continue;
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[c][e] *= inv;
    store_chunk<T, kVec>(row, j0, x[c]);
  }
}

// dscores may be dprobs (in place): a warp reads its whole row before it writes any of it. A dropout
// mask scales dprobs as it is read.
template <class T, int kVec, int kChunks>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    causal_softmax_backward_rows_kernel(T* dscores, const T* probs, const T* dprobs, const std::uint8_t* mask,
                                        float keep_scale, i64 rows, int seq) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32, valid = static_cast<int>(r % seq) + 1;
  const i64 offset = r * seq;
  float p[kChunks][kVec], dp[kChunks][kVec];
  float dot = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int j0 = (c * 32 + lane) * kVec;
    load_chunk<T, kVec>(p[c], probs + offset, j0, valid, 0.0f);
    load_chunk<T, kVec>(dp[c], dprobs + offset, j0, valid, 0.0f);
    if (mask != nullptr) {
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        dp[c][e] = j0 + e < valid && mask[offset + j0 + e] != 0 ? dp[c][e] * keep_scale : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) dot += p[c][e] * dp[c][e];
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int j0 = (c * 32 + lane) * kVec;
    if (j0 >= seq) continue;
#pragma unroll
    for (int e = 0; e < kVec; ++e) p[c][e] = j0 + e < valid ? p[c][e] * (dp[c][e] - dot) : 0.0f;
    store_chunk<T, kVec>(dscores + offset, j0, p[c]);
  }
}

// The loads a lane holds per row (1, 2, 4 or 8) where the warp kernels apply: rows of whole 16-byte
// loads, every pointer 16-byte aligned, at most kMaxChunks loads a lane; else 0 (the block kernels).
template <class T>
int row_chunks(int seq, std::initializer_list<const void*> pointers) {
  constexpr int vec = 16 / sizeof(T);
  if (seq % vec != 0) return 0;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return 0;
  const int loads = (seq / vec + 31) / 32;
  for (int c = 1; c <= kMaxChunks; c *= 2)
    if (loads <= c) return c;
  return 0;
}

// kernel<T, vec, chunks> for the chunks chosen, on ⌈rows / kRowsPerBlock⌉ blocks.
template <class T, template <class, int, int> class Kernel, class... Args>
void launch_rows(int chunks, i64 rows, cudaStream_t stream, Args... args) {
  constexpr int vec = 16 / sizeof(T);
  const auto blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const unsigned threads = kRowsPerBlock * 32;
  switch (chunks) {
    case 1: Kernel<T, vec, 1>::launch(blocks, threads, stream, args...); break;
    case 2: Kernel<T, vec, 2>::launch(blocks, threads, stream, args...); break;
    case 4: Kernel<T, vec, 4>::launch(blocks, threads, stream, args...); break;
    default: Kernel<T, vec, 8>::launch(blocks, threads, stream, args...); break;
  }
}
template <class T, int kVec, int kChunks>
struct ForwardRows {
  static void launch(unsigned blocks, unsigned threads, cudaStream_t stream, T* scores, i64 rows, int seq) {
    causal_softmax_forward_rows_kernel<T, kVec, kChunks><<<blocks, threads, 0, stream>>>(scores, rows, seq);
  }
};
template <class T, int kVec, int kChunks>
struct BackwardRows {
  static void launch(unsigned blocks, unsigned threads, cudaStream_t stream, T* dscores, const T* probs,
                     const T* dprobs, const std::uint8_t* mask, float keep_scale, i64 rows, int seq) {
    causal_softmax_backward_rows_kernel<T, kVec, kChunks>
        <<<blocks, threads, 0, stream>>>(dscores, probs, dprobs, mask, keep_scale, rows, seq);
  }
};

template <class T>
__global__ void causal_softmax_forward_kernel(T* scores, int seq) {
  __shared__ float shared[32];
  T* row = scores + static_cast<i64>(blockIdx.x) * seq;
  const int valid = static_cast<int>(blockIdx.x % seq) + 1;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, to_float(row[j]));
  mx = block_max(mx, shared);
  float sum = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(to_float(row[j]) - mx);
  const float inv = 1.0f / block_sum(sum, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x)
    row[j] = from_float<T>(j < valid ? expf(to_float(row[j]) - mx) * inv : 0.0f);
}

template <class T>
__global__ void causal_softmax_backward_kernel(T* dscores, const T* probs, const T* dprobs, const std::uint8_t* mask,
                                               float keep_scale, int seq) {
  __shared__ float shared[32];
  const i64 offset = static_cast<i64>(blockIdx.x) * seq;
  const int valid = static_cast<int>(blockIdx.x % seq) + 1;
  // dprobs through the dropout, where there is one.
  const auto g = [&](int j) {
    const float d = to_float(dprobs[offset + j]);
    return mask == nullptr ? d : mask[offset + j] != 0 ? d * keep_scale : 0.0f;
  };
  float dot = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) dot += to_float(probs[offset + j]) * g(j);
  dot = block_sum(dot, shared);  // its barrier: every thread has read the row before any writes (in place)
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float ds = j < valid ? to_float(probs[offset + j]) * (g(j) - dot) : 0.0f;
    dscores[offset + j] = from_float<T>(ds);
  }
}

unsigned row_threads(int seq) { return seq >= 1024 ? 1024u : (seq >= 256 ? 256u : 64u); }
}  // namespace

template <class T>
void causal_softmax_forward(T* scores, i64 rows, int seq, cudaStream_t stream) {
  if (rows == 0) return;
  if (const int chunks = row_chunks<T>(seq, {scores}); chunks > 0)
    launch_rows<T, ForwardRows>(chunks, rows, stream, scores, rows, seq);
  else
    causal_softmax_forward_kernel<<<static_cast<unsigned>(rows), row_threads(seq), 0, stream>>>(scores, seq);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void causal_softmax_backward(T* dscores, const T* probs, const T* dprobs, const std::uint8_t* mask, float keep_scale,
                             i64 rows, int seq, cudaStream_t stream) {
  if (rows == 0) return;
  if (const int chunks = row_chunks<T>(seq, {dscores, probs, dprobs}); chunks > 0)
    launch_rows<T, BackwardRows>(chunks, rows, stream, dscores, probs, dprobs, mask, keep_scale, rows, seq);
  else
    causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), row_threads(seq), 0, stream>>>(dscores, probs, dprobs,
                                                                                                 mask, keep_scale, seq);
  CUDA_CHECK_LAUNCH();
}

template void causal_softmax_forward<float>(float*, i64, int, cudaStream_t);
template void causal_softmax_forward<bf16>(bf16*, i64, int, cudaStream_t);
template void causal_softmax_backward<float>(float*, const float*, const float*, const std::uint8_t*, float, i64, int,
                                             cudaStream_t);
template void causal_softmax_backward<bf16>(bf16*, const bf16*, const bf16*, const std::uint8_t*, float, i64, int,
                                            cudaStream_t);

}  // namespace loom::kernels
