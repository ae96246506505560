// Casts between fp32 and bf16 (rounding to nearest even, as kernels/numerics.h does on the host):
// the bf16 compute copy of fp32 weights, fp32 views of bf16 activations for checkpoints and tests.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
struct Identity {
  __device__ float operator()(float x) const { return x; }
};
template <class To, class From>
__global__ void cast_rows_kernel(To* dst, i64 ld_dst, const From* src, i64 ld_src, i64 rows, i64 cols) {
  LOOM_GRID_STRIDE(i, rows * cols) {
    const i64 r = i / cols, c = i % cols;
    dst[r * ld_dst + c] = from_float<To>(to_float(src[r * ld_src + c]));
  }
}
}  // namespace

template <class To, class From>
void cast(To* dst, const From* src, i64 n, cudaStream_t stream) {
  map(n, Identity{}, stream, dst, src);
}

template <class To, class From>
void cast_rows(To* dst, i64 ld_dst, const From* src, i64 ld_src, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  cast_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols);
  CUDA_CHECK_LAUNCH();
}

template void cast<bf16, float>(bf16*, const float*, i64, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, i64, cudaStream_t);
template void cast_rows<bf16, float>(bf16*, i64, const float*, i64, i64, i64, cudaStream_t);
template void cast_rows<float, bf16>(float*, i64, const bf16*, i64, i64, i64, cudaStream_t);

}  // namespace loom::kernels
