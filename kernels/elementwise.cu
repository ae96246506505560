// Element-wise vector ops: axpy (residual and gradient accumulation, fp32 += bf16 included), add,
// scale, copy and zero; the backend's zero/copy/axpy/add/scale.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class Y, class X>
__global__ void axpy_kernel(Y* y, float alpha, const X* x, i64 n) {
  LOOM_GRID_STRIDE(i, n) y[i] = from_float<Y>(to_float(y[i]) + alpha * to_float(x[i]));
}
template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, i64 n) {
  LOOM_GRID_STRIDE(i, n) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}
template <class T>
__global__ void scale_kernel(T* x, float alpha, i64 n) {
  LOOM_GRID_STRIDE(i, n) x[i] = from_float<T>(to_float(x[i]) * alpha);
}
}  // namespace

template <class Y, class X>
void axpy(Y* y, float alpha, const X* x, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, alpha, x, n);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void add(T* out, const T* a, const T* b, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void scale(T* x, float alpha, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, alpha, n);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void copy(T* dst, const T* src, i64 n, cudaStream_t stream) {
  if (n == 0 || dst == src) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
}
template <class T>
void zero(T* x, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<std::size_t>(n) * sizeof(T), stream));
}

template void axpy<float, float>(float*, float, const float*, i64, cudaStream_t);
template void axpy<bf16, bf16>(bf16*, float, const bf16*, i64, cudaStream_t);
template void axpy<float, bf16>(float*, float, const bf16*, i64, cudaStream_t);
#define LOOM_INSTANTIATE(T)                                        \
  template void add<T>(T*, const T*, const T*, i64, cudaStream_t); \
  template void scale<T>(T*, float, i64, cudaStream_t);            \
  template void copy<T>(T*, const T*, i64, cudaStream_t);          \
  template void zero<T>(T*, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
