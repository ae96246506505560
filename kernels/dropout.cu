// Dropout: the keep mask drawn from kernels/numerics.h's counter-based hash of each value's global
// position (the CPU backend draws the same one), and the mask applied with the keep scale.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/numerics.h"
#include "kernels/ops.h"
#include "kernels/packs.cuh"

namespace loom::kernels {

namespace {
__global__ void dropout_mask_kernel(std::uint8_t* mask, i64 n, std::uint64_t key, std::uint64_t first,
                                    std::uint64_t threshold) {
  LOOM_GRID_STRIDE(i, n) mask[i] = dropout_keep(key, first + static_cast<std::uint64_t>(i), threshold) ? 1 : 0;
}
struct ApplyMask {
  float scale;
  __device__ float operator()(float x, float keep) const { return keep != 0.0f ? x * scale : 0.0f; }
};
}  // namespace

void dropout_mask(std::uint8_t* mask, i64 n, std::uint64_t key, std::uint64_t first, float p, cudaStream_t stream) {
  if (n == 0) return;
  dropout_mask_kernel<<<grid_for(n), kThreads, 0, stream>>>(mask, n, key, first, dropout_threshold(p));
  CUDA_CHECK_LAUNCH();
}
template <class T>
void apply_mask(T* out, const T* in, const std::uint8_t* mask, i64 n, float scale, cudaStream_t stream) {
  map(n, ApplyMask{scale}, stream, out, in, mask);
}

template void apply_mask<float>(float*, const float*, const std::uint8_t*, i64, float, cudaStream_t);
template void apply_mask<bf16>(bf16*, const bf16*, const std::uint8_t*, i64, float, cudaStream_t);

}  // namespace loom::kernels
