// Bias add (forward, in place over rows) and bias gradient (column sums of dy added to an fp32
// gradient, in a fixed order so runs are reproducible).
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class T>
__global__ void add_bias_kernel(T* x, const T* bias, i64 rows, i64 cols) {
  LOOM_GRID_STRIDE(i, rows * cols) x[i] = from_float<T>(to_float(x[i]) + to_float(bias[i % cols]));
}
template <class T>
struct DyValue {
  const T* dy;
  i64 cols;
  __device__ float2 operator()(i64 r, i64 c) const { return make_float2(to_float(dy[r * cols + c]), 0.0f); }
};
}  // namespace

template <class T>
void add_bias(T* x, const T* bias, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(x, bias, rows, cols);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void bias_grad(float* dbias, const T* dy, i64 rows, i64 cols, cudaStream_t stream) {
  if (cols == 0) return;
  add_column_sums(dbias, nullptr, rows, cols, DyValue<T>{dy, cols}, stream);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                        \
  template void add_bias<T>(T*, const T*, i64, i64, cudaStream_t); \
  template void bias_grad<T>(float*, const T*, i64, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
