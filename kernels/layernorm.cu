// LayerNorm (Ba et al. 2016) over rows, eps 1e-5, statistics in fp32 with one warp per row, each lane
// reading packs of consecutive values (kernels/packs.cuh) where rows fill them; the backward writes dx
// per row and adds the weight and bias gradients as fp32 column sums.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = kThreads / 32;

template <int W, class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, i64 rows,
                                         i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  const i64 packs = cols / W;
  float s = 0;
  for (i64 p = lane; p < packs; p += 32) {
    float v[W];
    load_floats(v, xr, p);
#pragma unroll
    for (int k = 0; k < W; ++k) s += v[k];
  }
  const float m = warp_sum(s) / static_cast<float>(cols);
  float var = 0;
  for (i64 p = lane; p < packs; p += 32) {
    float v[W];
    load_floats(v, xr, p);
#pragma unroll
    for (int k = 0; k < W; ++k) var += (v[k] - m) * (v[k] - m);
  }
  const float rs = 1.0f / sqrtf(warp_sum(var) / static_cast<float>(cols) + kEps);
  T* o = out + r * cols;
  for (i64 p = lane; p < packs; p += 32) {
    auto [v, wv, bv] = load_packs<W>(p, xr, w, b).v;
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = (v[k] - m) * rs * wv[k] + bv[k];
    store_floats(o, p, v);
  }
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <int W, class T>
__global__ void layernorm_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* mean, const float* rstd,
                                    i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  const T* d = dout + r * cols;
  const i64 packs = cols / W;
  const float m = mean[r], rs = rstd[r];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (i64 p = lane; p < packs; p += 32) {
    auto [xv, wv, dv] = load_packs<W>(p, xr, w, d).v;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float dnorm = wv[k] * dv[k];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (xv[k] - m) * rs;
    }
  }
  dnorm_mean = warp_sum(dnorm_mean) / static_cast<float>(cols);
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / static_cast<float>(cols);
  T* dxr = dx + r * cols;
  for (i64 p = lane; p < packs; p += 32) {
    auto [xv, wv, dv] = load_packs<W>(p, xr, w, d).v;
#pragma unroll
    for (int k = 0; k < W; ++k) xv[k] = (wv[k] * dv[k] - dnorm_mean - (xv[k] - m) * rs * dnorm_norm_mean) * rs;
    store_floats(dxr, p, xv);
  }
}

// (norm·dout, dout) at (r, c): the terms of dw and db.
template <class T>
struct LayerNormParamGrads {
  const T *dout, *x;
  const float *mean, *rstd;
  i64 cols;
  __device__ float2 operator()(i64 r, i64 c) const {
    const float d = to_float(dout[r * cols + c]);
    return make_float2((to_float(x[r * cols + c]) - mean[r]) * rstd[r] * d, d);
  }
};
}  // namespace

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, i64 rows, i64 cols,
                       cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows_fill_packs<pack_width<T>()>(cols, out, x, w, b))
    layernorm_forward_kernel<pack_width<T>()><<<grid, kThreads, 0, stream>>>(out, mean, rstd, x, w, b, rows, cols);
  else
    layernorm_forward_kernel<1><<<grid, kThreads, 0, stream>>>(out, mean, rstd, x, w, b, rows, cols);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void layernorm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w, const float* mean,
                        const float* rstd, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows_fill_packs<pack_width<T>()>(cols, dx, dout, x, w))
    layernorm_dx_kernel<pack_width<T>()><<<grid, kThreads, 0, stream>>>(dx, dout, x, w, mean, rstd, rows, cols);
  else
    layernorm_dx_kernel<1><<<grid, kThreads, 0, stream>>>(dx, dout, x, w, mean, rstd, rows, cols);
  CUDA_CHECK_LAUNCH();
  add_column_sums(dw, db, rows, cols, LayerNormParamGrads<T>{dout, x, mean, rstd, cols}, stream);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                                         \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, i64, i64, cudaStream_t);     \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*, const float*, \
                                      i64, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
