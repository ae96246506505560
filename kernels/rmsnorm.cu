// RMSNorm (Zhang & Sennrich 2019) over rows, eps 1e-5, one warp per row in fp32, each lane reading
// packs of consecutive values (kernels/packs.cuh) where rows fill them; the backward writes dx per row
// and adds the weight gradient as fp32 column sums.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = kThreads / 32;

template <int W, class T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* x, const T* w, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  const i64 packs = cols / W;
  float ms = 0;
  for (i64 p = lane; p < packs; p += 32) {
    float v[W];
    load_floats(v, xr, p);
#pragma unroll
    for (int k = 0; k < W; ++k) ms += v[k] * v[k];
  }
  const float s = 1.0f / sqrtf(warp_sum(ms) / static_cast<float>(cols) + kEps);
  for (i64 p = lane; p < packs; p += 32) {
    auto [v, wv] = load_packs<W>(p, xr, w).v;
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = v[k] * s * wv[k];
    store_floats(out + r * cols, p, v);
  }
  if (lane == 0) rstd[r] = s;
}

template <int W, class T>
__global__ void rmsnorm_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* rstd, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  const T* d = dout + r * cols;
  const i64 packs = cols / W;
  const float rs = rstd[r];
  float dot = 0;
  for (i64 p = lane; p < packs; p += 32) {
    auto [xv, wv, dv] = load_packs<W>(p, xr, w, d).v;
#pragma unroll
    for (int k = 0; k < W; ++k) dot += wv[k] * dv[k] * xv[k];
  }
  const float k = warp_sum(dot) * rs * rs * rs / static_cast<float>(cols);
  for (i64 p = lane; p < packs; p += 32) {
    auto [xv, wv, dv] = load_packs<W>(p, xr, w, d).v;
#pragma unroll
    for (int j = 0; j < W; ++j) xv[j] = wv[j] * dv[j] * rs - xv[j] * k;
    store_floats(dx + r * cols, p, xv);
  }
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
  if (rows_fill_packs<pack_width<T>()>(cols, out, x, w))
    rmsnorm_forward_kernel<pack_width<T>()><<<grid, kThreads, 0, stream>>>(out, rstd, x, w, rows, cols);
  else
    rmsnorm_forward_kernel<1><<<grid, kThreads, 0, stream>>>(out, rstd, x, w, rows, cols);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward(T* dx, float* dw, const T* dout, const T* x, const T* w, const float* rstd, i64 rows, i64 cols,
                      cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows_fill_packs<pack_width<T>()>(cols, dx, dout, x, w))
    rmsnorm_dx_kernel<pack_width<T>()><<<grid, kThreads, 0, stream>>>(dx, dout, x, w, rstd, rows, cols);
  else
    rmsnorm_dx_kernel<1><<<grid, kThreads, 0, stream>>>(dx, dout, x, w, rstd, rows, cols);
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
