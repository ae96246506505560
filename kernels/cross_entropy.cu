// Vocabulary-parallel cross-entropy pieces (Megatron-LM's VocabParallelCrossEntropy): per-row max,
// sum of exponentials and target logit over this rank's vocabulary columns, and the logits' gradient
// scale·(softmax − onehot) in place. One block per row; statistics in fp32.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

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

template <class T>
__global__ void cross_entropy_grad_kernel(T* logits, const float* max, const float* sum_exp, const int* targets,
                                          i64 cols, i64 valid_cols, i64 vocab_start, float scale) {
  T* row = logits + blockIdx.x * cols;
  const float mx = max[blockIdx.x], inv = 1.0f / sum_exp[blockIdx.x];
  const i64 target = targets[blockIdx.x];
  for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
    const float p = c < valid_cols ? expf(to_float(row[c]) - mx) * inv : 0.0f;
    row[c] = from_float<T>(scale * (p - (c + vocab_start == target ? 1.0f : 0.0f)));
  }
}

constexpr int kRowThreads = 512;
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
void cross_entropy_grad(T* logits, const float* max, const float* sum_exp, const int* targets, i64 rows, i64 cols,
                        i64 valid_cols, i64 vocab_start, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_grad_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, max, sum_exp, targets, cols, valid_cols, vocab_start, scale);
  CUDA_CHECK_LAUNCH();
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
  template void cross_entropy_grad<T>(T*, const float*, const float*, const int*, i64, i64, i64, i64, float, \
                                      cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
