// The residual add of a transformer block's branch: out = x + dropout(branch + bias) in one pass, as
// Megatron-LM's fused bias-dropout-add does, in packs (kernels/packs.cuh). Unfused, the same result
// took add_bias, apply_mask and add: three passes over the branch and a fourth over the sum, which the
// 2026-11-28 op table measured at 91 µs a call for GPT-2 small's 8 × 1024 × 768 bf16 values, several
// times what their bytes take at the H200's bandwidth (docs/gpu-validation.md). Intermediates are
// rounded to T where those kernels stored them, so the sum is bit for bit theirs.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
template <int W, class T>
__global__ void bias_dropout_add_kernel(T* out, const T* x, const T* branch, const T* bias, const std::uint8_t* mask,
                                        i64 packs, i64 row_packs, float scale) {
  LOOM_GRID_STRIDE(p, packs) {
    const Pack<T, W> xs = reinterpret_cast<const Pack<T, W>*>(x)[p];
    const Pack<T, W> bs = reinterpret_cast<const Pack<T, W>*>(branch)[p];
    Pack<T, W> biases{};
    Pack<std::uint8_t, W> keep{};
    if (bias != nullptr) biases = reinterpret_cast<const Pack<T, W>*>(bias)[p % row_packs];
    if (mask != nullptr) keep = reinterpret_cast<const Pack<std::uint8_t, W>*>(mask)[p];
    Pack<T, W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float v = to_float(bs.v[k]);
      if (bias != nullptr) v = rounded<T>(v + to_float(biases.v[k]));
      if (mask != nullptr) v = rounded<T>(keep.v[k] != 0 ? v * scale : 0.0f);
      o.v[k] = from_float<T>(to_float(xs.v[k]) + v);
    }
    reinterpret_cast<Pack<T, W>*>(out)[p] = o;
  }
}
}  // namespace

template <class T>
void bias_dropout_add(T* out, const T* x, const T* branch, const T* bias, const std::uint8_t* mask, i64 rows, i64 cols,
                      float scale, cudaStream_t stream) {
  const i64 n = rows * cols;
  if (n == 0) return;
  constexpr int W = pack_width<T>();  // whole packs within each row, or one value a thread
  if (rows_fill_packs<W>(cols, out, x, branch, bias, mask)) {
    bias_dropout_add_kernel<W>
        <<<grid_for(n / W), kThreads, 0, stream>>>(out, x, branch, bias, mask, n / W, cols / W, scale);
  } else {
    bias_dropout_add_kernel<1><<<grid_for(n), kThreads, 0, stream>>>(out, x, branch, bias, mask, n, cols, scale);
  }
  CUDA_CHECK_LAUNCH();
}

template void bias_dropout_add<float>(float*, const float*, const float*, const float*, const std::uint8_t*, i64, i64,
                                      float, cudaStream_t);
template void bias_dropout_add<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const std::uint8_t*, i64, i64, float,
                                     cudaStream_t);

}  // namespace loom::kernels
