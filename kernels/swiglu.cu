// SwiGLU (Shazeer 2020) on rows of [gate | up] → silu(gate)·up, forward and backward, through
// kernels/activations.h's formulas.
#include "kernels/activations.h"
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* in, i64 rows, i64 f) {
  LOOM_GRID_STRIDE(i, rows * f) {
    const i64 r = i / f, c = i % f;
    out[i] = from_float<T>(swiglu(to_float(in[r * 2 * f + c]), to_float(in[r * 2 * f + f + c])));
  }
}
template <class T>
__global__ void swiglu_backward_kernel(T* din, const T* in, const T* dout, i64 rows, i64 f) {
  LOOM_GRID_STRIDE(i, rows * f) {
    const i64 r = i / f, c = i % f;
    const float g = to_float(in[r * 2 * f + c]), u = to_float(in[r * 2 * f + f + c]), d = to_float(dout[i]);
    din[r * 2 * f + c] = from_float<T>(d * swiglu_gate_derivative(g, u));
    din[r * 2 * f + f + c] = from_float<T>(d * swiglu_up_derivative(g));
  }
}
}  // namespace

template <class T>
void swiglu_forward(T* out, const T* in, i64 rows, i64 f, cudaStream_t stream) {
  if (rows * f == 0) return;
  swiglu_forward_kernel<<<grid_for(rows * f), kThreads, 0, stream>>>(out, in, rows, f);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void swiglu_backward(T* din, const T* in, const T* dout, i64 rows, i64 f, cudaStream_t stream) {
  if (rows * f == 0) return;
  swiglu_backward_kernel<<<grid_for(rows * f), kThreads, 0, stream>>>(din, in, dout, rows, f);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                              \
  template void swiglu_forward<T>(T*, const T*, i64, i64, cudaStream_t); \
  template void swiglu_backward<T>(T*, const T*, const T*, i64, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
