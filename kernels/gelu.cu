// GELU, tanh form (GPT-2), forward and backward, through kernels/activations.h's formulas, in packs
// (kernels/packs.cuh).
#include "kernels/activations.h"
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
struct Gelu {
  __device__ float operator()(float x) const { return gelu(x); }
};
struct GeluBackward {
  __device__ float operator()(float x, float dout) const { return dout * gelu_derivative(x); }
};
}  // namespace

template <class T>
void gelu_forward(T* out, const T* in, i64 n, cudaStream_t stream) {
  map(n, Gelu{}, stream, out, in);
}
template <class T>
void gelu_backward(T* din, const T* in, const T* dout, i64 n, cudaStream_t stream) {
  map(n, GeluBackward{}, stream, din, in, dout);
}

#define LOOM_INSTANTIATE(T)                                       \
  template void gelu_forward<T>(T*, const T*, i64, cudaStream_t); \
  template void gelu_backward<T>(T*, const T*, const T*, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
