// Bias add (forward, in place over rows, in packs: kernels/packs.cuh) and bias gradient (column sums
// of dy added to an fp32 gradient, in a fixed order so runs are reproducible).
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
template <int W, class T>
__global__ void add_bias_kernel(T* x, const T* bias, i64 packs, i64 row_packs) {
  LOOM_GRID_STRIDE(p, packs) {
    Pack<T, W> v = reinterpret_cast<Pack<T, W>*>(x)[p];
    const Pack<T, W> b = reinterpret_cast<const Pack<T, W>*>(bias)[p % row_packs];
#pragma unroll
    for (int k = 0; k < W; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + to_float(b.v[k]));
    reinterpret_cast<Pack<T, W>*>(x)[p] = v;
  }
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
  constexpr int W = pack_width<T>();  // whole packs within each row, or one value a thread
  if (rows_fill_packs<W>(cols, x, bias)) {
    add_bias_kernel<W><<<grid_for(rows * cols / W), kThreads, 0, stream>>>(x, bias, rows * cols / W, cols / W);
  } else {
    add_bias_kernel<1><<<grid_for(rows * cols), kThreads, 0, stream>>>(x, bias, rows * cols, cols);
  }
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
