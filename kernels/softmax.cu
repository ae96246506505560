// Causal softmax for the unfused attention path: in place over rows of scores (already scaled by
// 1/√d), columns past the row's position zeroed; the backward dS = P·(dP − Σ P·dP). One block per
// row, fp32 statistics.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
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
__global__ void causal_softmax_backward_kernel(T* dscores, const T* probs, const T* dprobs, int seq) {
  __shared__ float shared[32];
  const i64 offset = static_cast<i64>(blockIdx.x) * seq;
  const int valid = static_cast<int>(blockIdx.x % seq) + 1;
  float dot = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x)
    dot += to_float(probs[offset + j]) * to_float(dprobs[offset + j]);
  dot = block_sum(dot, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float ds = j < valid ? to_float(probs[offset + j]) * (to_float(dprobs[offset + j]) - dot) : 0.0f;
    dscores[offset + j] = from_float<T>(ds);
  }
}

unsigned row_threads(int seq) { return seq >= 1024 ? 1024u : (seq >= 256 ? 256u : 64u); }
}  // namespace

template <class T>
void causal_softmax_forward(T* scores, i64 rows, int seq, cudaStream_t stream) {
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(rows), row_threads(seq), 0, stream>>>(scores, seq);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void causal_softmax_backward(T* dscores, const T* probs, const T* dprobs, i64 rows, int seq, cudaStream_t stream) {
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), row_threads(seq), 0, stream>>>(dscores, probs, dprobs,
                                                                                               seq);
  CUDA_CHECK_LAUNCH();
}

template void causal_softmax_forward<float>(float*, i64, int, cudaStream_t);
template void causal_softmax_forward<bf16>(bf16*, i64, int, cudaStream_t);
template void causal_softmax_backward<float>(float*, const float*, const float*, i64, int, cudaStream_t);
template void causal_softmax_backward<bf16>(bf16*, const bf16*, const bf16*, i64, int, cudaStream_t);

}  // namespace loom::kernels
