// Casts between fp32 and bf16 (rounding to nearest even, as kernels/numerics.h does on the host):
// the bf16 compute copy of fp32 weights, fp32 views of bf16 activations for checkpoints and tests.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class To, class From>
__global__ void cast_kernel(To* dst, const From* src, i64 n) {
  LOOM_GRID_STRIDE(i, n) dst[i] = from_float<To>(to_float(src[i]));
}
}  // namespace

template <class To, class From>
void cast(To* dst, const From* src, i64 n, cudaStream_t stream) {
  if (n == 0) return;
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

template void cast<bf16, float>(bf16*, const float*, i64, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, i64, cudaStream_t);

}  // namespace loom::kernels
