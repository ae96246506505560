// GELU, tanh form (GPT-2), forward and backward, through kernels/activations.h's formulas.
#include "kernels/activations.h"
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class T>
__global__ void gelu_forward_kernel(T* out, const T* in, i64 n) {
  LOOM_GRID_STRIDE(i, n) out[i] = from_float<T>(gelu(to_float(in[i])));
}
template <class T>
__global__ void gelu_backward_kernel(T* din, const T* in, const T* dout, i64 n) {
  LOOM_GRID_STRIDE(i, n) din[i] = from_float<T>(to_float(dout[i]) * gelu_derivative(to_float(in[i])));
}
}  // namespace

template <class T>
void gelu_forward(T* out, const T* in, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void gelu_backward(T* din, const T* in, const T* dout, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(din, in, dout, n);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                       \
  template void gelu_forward<T>(T*, const T*, i64, cudaStream_t); \
  template void gelu_backward<T>(T*, const T*, const T*, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
