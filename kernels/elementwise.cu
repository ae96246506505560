// Element-wise vector ops: axpy (residual and gradient accumulation, fp32 += bf16 included), add,
// scale (in packs, kernels/packs.cuh), copy and zero; the backend's zero/copy/axpy/add/scale.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
struct Axpy {
  float alpha;
  __device__ float operator()(float y, float x) const { return y + alpha * x; }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Scale {
  float alpha;
  __device__ float operator()(float x) const { return x * alpha; }
};
}  // namespace

template <class Y, class X>
void axpy(Y* y, float alpha, const X* x, i64 n, cudaStream_t stream) {
  map(n, Axpy{alpha}, stream, y, static_cast<const Y*>(y), x);
}
template <class T>
void add(T* out, const T* a, const T* b, i64 n, cudaStream_t stream) {
  map(n, Add{}, stream, out, a, b);
}
template <class T>
void scale(T* x, float alpha, i64 n, cudaStream_t stream) {
  map(n, Scale{alpha}, stream, x, static_cast<const T*>(x));
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
