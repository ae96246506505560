// Sum of squares for the global gradient norm: each of a fixed number of blocks sums a grid-strided
// share in double, then one block adds the partials in order, so the result is the same every run.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class T>
__global__ void partial_sum_squares_kernel(double* partials, const T* x, i64 n) {
  __shared__ double warps[32];
  double s = 0;
  LOOM_GRID_STRIDE(i, n) {
    const double v = to_float(x[i]);
    s += v * v;
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warps[w];
  partials[blockIdx.x] = total;
}

__global__ void add_partials_kernel(double* out, const double* partials, bool accumulate) {
  double s = 0;
  for (int i = threadIdx.x; i < kSumSquaresBlocks; i += 32) s += partials[i];
  s = warp_sum(s);
  if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}
}  // namespace

template <class T>
void sum_squares(double* out, const T* x, i64 n, cudaStream_t stream, bool accumulate) {
  partial_sum_squares_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(out + 1, x, n);
  CUDA_CHECK_LAUNCH();
  add_partials_kernel<<<1, 32, 0, stream>>>(out, out + 1, accumulate);
  CUDA_CHECK_LAUNCH();
}

template void sum_squares<float>(double*, const float*, i64, cudaStream_t, bool);
template void sum_squares<bf16>(double*, const bf16*, i64, cudaStream_t, bool);

}  // namespace loom::kernels
