// Vocabulary-parallel cross-entropy pieces (Megatron-LM's VocabParallelCrossEntropy): per-row max,
// sum of exponentials and target logit over this rank's vocabulary columns, and the logits' gradient
// scale·(softmax − onehot) in place. One block per row; statistics in fp32. Where one rank holds the
// whole row, the max and the sum come from one pass (the online softmax of Milakov & Gimelshein 2018,
// "Online normalizer calculation for softmax"): the logits are GPT-2's largest tensor (8 × 1024 ×
// 50304 fp32 = 1.65 GB a micro-batch), and each pass over them took about 0.67 ms on an H200 on
// 2026-11-28 (docs/gpu-validation.md). Rows are read and written in packs (kernels/packs.cuh) where
// their width and address allow.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
template <class T>
__global__ void row_max_kernel(float* out, const T* logits, i64 cols, i64 valid_cols) {
  __shared__ float shared[32];
  const T* row = logits + blockIdx.x * cols;
  float mx = -INFINITY;
  for (i64 c = threadIdx.x; c < valid_cols; c += blockDim.x) mx = fmaxf(mx, to_float(row[c]));
  mx = block_max(mx, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = mx;
}

template <class T>
__global__ void row_sum_exp_kernel(float* out, const T* logits, const float* max, i64 cols, i64 valid_cols) {
  __shared__ float shared[32];
  const T* row = logits + blockIdx.x * cols;
  const float mx = max[blockIdx.x];
  float s = 0;
  for (i64 c = threadIdx.x; c < valid_cols; c += blockDim.x) s += expf(to_float(row[c]) - mx);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

template <class T>
__global__ void target_logit_kernel(float* out, const T* logits, const int* targets, i64 rows, i64 cols,
                                    i64 vocab_start) {
  LOOM_GRID_STRIDE(r, rows) {
    const i64 c = targets[r] - vocab_start;
    out[r] = (c >= 0 && c < cols) ? to_float(logits[r * cols + c]) : 0.0f;
  }
}

// A running maximum and the sum of exponentials relative to it; `merge` folds in another partial (a
// pack's, a lane's, a warp's), rescaling the sum of the smaller maximum. An empty one is (−∞, 0). A NaN
// logit, which fmaxf passes over, reaches the sum as NaN, as row_sum_exp and the CPU backend carry it:
// a partial of NaNs alone is (−∞, NaN).
struct MaxSum {
  float max = -INFINITY, sum = 0.0f;
  __device__ void merge(float other_max, float other_sum) {
    const float m = fmaxf(max, other_max);
    if (m == -INFINITY) {  // neither holds a number: both sums are 0, or NaN after a NaN
      sum += other_sum;
      return;
    }
    sum = sum * expf(max - m) + other_sum * expf(other_max - m);
    max = m;
  }
};

template <int W, class T>
__global__ void row_max_sum_exp_kernel(float* max_out, float* sum_out, const T* logits, i64 cols, i64 valid_cols) {
  __shared__ float maxes[32], sums[32];
  const T* row = logits + blockIdx.x * cols;
  MaxSum acc;
  for (i64 p = threadIdx.x; p < cols / W; p += blockDim.x) {
    const Pack<T, W> v = reinterpret_cast<const Pack<T, W>*>(row)[p];
    float x[W], m = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      x[k] = p * W + k < valid_cols ? to_float(v.v[k]) : -INFINITY;
      m = fmaxf(m, x[k]);
    }
    // −∞ (padding) adds 0 even where m is −∞; a NaN adds NaN.
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < W; ++k) s += x[k] == -INFINITY ? 0.0f : expf(x[k] - m);
    acc.merge(m, s);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m = __shfl_xor_sync(0xFFFFFFFFu, acc.max, offset), s = __shfl_xor_sync(0xFFFFFFFFu, acc.sum, offset);
    acc.merge(m, s);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    maxes[warp] = acc.max;
    sums[warp] = acc.sum;
  }
  __syncthreads();
  if (warp != 0) return;
  MaxSum total;
  if (lane < static_cast<int>(blockDim.x / 32)) total = MaxSum{maxes[lane], sums[lane]};
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m = __shfl_xor_sync(0xFFFFFFFFu, total.max, offset);
    const float s = __shfl_xor_sync(0xFFFFFFFFu, total.sum, offset);
    total.merge(m, s);
  }
  if (lane == 0) {
    max_out[blockIdx.x] = total.max;
    sum_out[blockIdx.x] = total.sum;
  }
}

// out (in place where out is logits) ← the gradient, computed in fp32 and rounded once to Out.
template <int W, class In, class Out>
__global__ void cross_entropy_grad_kernel(Out* out, const In* logits, const float* max, const float* sum_exp,
                                          const int* targets, i64 cols, i64 valid_cols, i64 vocab_start, float scale) {
  const In* row = logits + blockIdx.x * cols;
  Out* out_row = out + blockIdx.x * cols;
  const float mx = max[blockIdx.x], inv = 1.0f / sum_exp[blockIdx.x];
  const i64 target = targets[blockIdx.x];
  for (i64 p = threadIdx.x; p < cols / W; p += blockDim.x) {
    const Pack<In, W> v = reinterpret_cast<const Pack<In, W>*>(row)[p];
    Pack<Out, W> g;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const i64 c = p * W + k;
      const float prob = c < valid_cols ? expf(to_float(v.v[k]) - mx) * inv : 0.0f;
      g.v[k] = from_float<Out>(scale * (prob - (c + vocab_start == target ? 1.0f : 0.0f)));
    }
    reinterpret_cast<Pack<Out, W>*>(out_row)[p] = g;
  }
}

constexpr int kRowThreads = 512;

template <class In, class Out>
void launch_cross_entropy_grad(Out* out, const In* logits, const float* max, const float* sum_exp, const int* targets,
                               i64 rows, i64 cols, i64 valid_cols, i64 vocab_start, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>(rows);
  if (rows_fill_packs<pack_width<In, Out>()>(cols, logits, out)) {
    cross_entropy_grad_kernel<pack_width<In, Out>()>
        <<<blocks, kRowThreads, 0, stream>>>(out, logits, max, sum_exp, targets, cols, valid_cols, vocab_start, scale);
  } else {
    cross_entropy_grad_kernel<1>
        <<<blocks, kRowThreads, 0, stream>>>(out, logits, max, sum_exp, targets, cols, valid_cols, vocab_start, scale);
  }
  CUDA_CHECK_LAUNCH();
}
}  // namespace

template <class T>
void row_max(float* out, const T* logits, i64 rows, i64 cols, i64 valid_cols, cudaStream_t stream) {
  if (rows == 0) return;
  row_max_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(out, logits, cols, valid_cols);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void row_sum_exp(float* out, const T* logits, const float* max, i64 rows, i64 cols, i64 valid_cols,
                 cudaStream_t stream) {
  if (rows == 0) return;
  row_sum_exp_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(out, logits, max, cols, valid_cols);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void target_logit(float* out, const T* logits, const int* targets, i64 rows, i64 cols, i64 vocab_start,
                  cudaStream_t stream) {
  if (rows == 0) return;
  target_logit_kernel<<<grid_for(rows), kThreads, 0, stream>>>(out, logits, targets, rows, cols, vocab_start);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void row_max_sum_exp(float* max, float* sum_exp, const T* logits, i64 rows, i64 cols, i64 valid_cols,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>(rows);
  if (rows_fill_packs<pack_width<T>()>(cols, logits)) {
    row_max_sum_exp_kernel<pack_width<T>()><<<blocks, kRowThreads, 0, stream>>>(max, sum_exp, logits, cols, valid_cols);
  } else {
    row_max_sum_exp_kernel<1><<<blocks, kRowThreads, 0, stream>>>(max, sum_exp, logits, cols, valid_cols);
  }
  CUDA_CHECK_LAUNCH();
}
template <class T>
void cross_entropy_grad(T* logits, const float* max, const float* sum_exp, const int* targets, i64 rows, i64 cols,
                        i64 valid_cols, i64 vocab_start, float scale, cudaStream_t stream) {
  launch_cross_entropy_grad(logits, static_cast<const T*>(logits), max, sum_exp, targets, rows, cols, valid_cols,
                            vocab_start, scale, stream);
}
void cross_entropy_grad(bf16* out, const float* logits, const float* max, const float* sum_exp, const int* targets,
                        i64 rows, i64 cols, i64 valid_cols, i64 vocab_start, float scale, cudaStream_t stream) {
  launch_cross_entropy_grad(out, logits, max, sum_exp, targets, rows, cols, valid_cols, vocab_start, scale, stream);
}

namespace {
constexpr int kLossThreads = 256;
__global__ void add_token_losses_kernel(double* total, const float* max, const float* sum_exp, const float* target,
                                        i64 rows) {
  __shared__ double warps[kLossThreads / 32];
  double s = 0;
  for (i64 r = threadIdx.x; r < rows; r += blockDim.x) s += log(static_cast<double>(sum_exp[r])) + max[r] - target[r];
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double sum = 0;
  for (int w = 0; w < kLossThreads / 32; ++w) sum += warps[w];
  *total += sum;
}
}  // namespace

void add_token_losses(double* total, const float* max, const float* sum_exp, const float* target, i64 rows,
                      cudaStream_t stream) {
  if (rows == 0) return;
  add_token_losses_kernel<<<1, kLossThreads, 0, stream>>>(total, max, sum_exp, target, rows);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                                  \
  template void row_max<T>(float*, const T*, i64, i64, i64, cudaStream_t);                                   \
  template void row_sum_exp<T>(float*, const T*, const float*, i64, i64, i64, cudaStream_t);                 \
  template void target_logit<T>(float*, const T*, const int*, i64, i64, i64, cudaStream_t);                  \
  template void row_max_sum_exp<T>(float*, float*, const T*, i64, i64, i64, cudaStream_t);                   \
  template void cross_entropy_grad<T>(T*, const float*, const float*, const int*, i64, i64, i64, i64, float, \
                                      cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
