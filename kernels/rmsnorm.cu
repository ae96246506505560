// RMSNorm (Zhang & Sennrich 2019) over rows, eps 1e-5, one warp per row in fp32; the backward writes
// dx per row and adds the weight gradient as fp32 column sums.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = kThreads / 32;

template <class T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* x, const T* w, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  float ms = 0;
  for (i64 c = lane; c < cols; c += 32) ms += to_float(xr[c]) * to_float(xr[c]);
  const float s = 1.0f / sqrtf(warp_sum(ms) / static_cast<float>(cols) + kEps);
  for (i64 c = lane; c < cols; c += 32) out[r * cols + c] = from_float<T>(to_float(xr[c]) * s * to_float(w[c]));
  if (lane == 0) rstd[r] = s;
}

template <class T>
__global__ void rmsnorm_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* rstd, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  const T* d = dout + r * cols;
  const float rs = rstd[r];
  float dot = 0;
  for (i64 c = lane; c < cols; c += 32) dot += to_float(w[c]) * to_float(d[c]) * to_float(xr[c]);
  const float k = warp_sum(dot) * rs * rs * rs / static_cast<float>(cols);
  for (i64 c = lane; c < cols; c += 32)
    dx[r * cols + c] = from_float<T>(to_float(w[c]) * to_float(d[c]) * rs - to_float(xr[c]) * k);
}

template <class T>
struct RmsNormWeightGrad {
  const T *dout, *x;
  const float* rstd;
  i64 cols;
  __device__ float2 operator()(i64 r, i64 c) const {
    return make_float2(to_float(x[r * cols + c]) * rstd[r] * to_float(dout[r * cols + c]), 0.0f);
  }
};
}  // namespace

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* w, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  rmsnorm_forward_kernel<<<grid, kThreads, 0, stream>>>(out, rstd, x, w, rows, cols);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward(T* dx, float* dw, const T* dout, const T* x, const T* w, const float* rstd, i64 rows, i64 cols,
                      cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  rmsnorm_dx_kernel<<<grid, kThreads, 0, stream>>>(dx, dout, x, w, rstd, rows, cols);
  CUDA_CHECK_LAUNCH();
  add_column_sums(dw, nullptr, rows, cols, RmsNormWeightGrad<T>{dout, x, rstd, cols}, stream);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                 \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, i64, i64, cudaStream_t); \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, i64, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
