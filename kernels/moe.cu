// Mixture-of-experts row ops: tokens gathered into their experts' order (and any permutation of rows),
// each token's k expert outputs summed back, rows scaled by their router probability, and the
// probability's gradient as a row dot product. One thread per output value (a warp per row for the dot),
// each output written once: no atomics, the same bits on every run.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
__global__ void index_rows_kernel(char* out, const char* in, const int* index, i64 rows, i64 row_bytes) {
  LOOM_GRID_STRIDE(idx, rows * row_bytes) {
    const i64 r = idx / row_bytes, b = idx % row_bytes;
    out[idx] = in[static_cast<i64>(index[r]) * row_bytes + b];
  }
}
template <class T>
__global__ void sum_indexed_rows_kernel(T* out, const T* in, const int* index, i64 rows, int k, i64 cols) {
  LOOM_GRID_STRIDE(idx, rows * cols) {
    const i64 r = idx / cols, c = idx % cols;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += to_float(in[static_cast<i64>(index[r * k + j]) * cols + c]);
    out[idx] = from_float<T>(sum);
  }
}
template <class T>
__global__ void scale_rows_kernel(T* out, const T* in, const float* scales, i64 rows, i64 cols) {
  LOOM_GRID_STRIDE(idx, rows * cols) { out[idx] = from_float<T>(scales[idx / cols] * to_float(in[idx])); }
}
// One warp per row: lanes stride the columns, then a shuffle tree in a fixed order.
template <class T>
__global__ void row_dots_kernel(float* out, const T* a, const T* b, i64 rows, i64 cols) {
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  for (i64 r = (blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    float sum = 0.0f;
    for (i64 c = threadIdx.x % 32; c < cols; c += 32) sum += to_float(a[r * cols + c]) * to_float(b[r * cols + c]);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) out[r] = sum;
  }
}
}  // namespace

void index_rows(void* out, const void* in, const int* index, i64 rows, i64 row_bytes, cudaStream_t stream) {
  if (rows * row_bytes == 0) return;
  index_rows_kernel<<<grid_for(rows * row_bytes), kThreads, 0, stream>>>(
      static_cast<char*>(out), static_cast<const char*>(in), index, rows, row_bytes);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void sum_indexed_rows(T* out, const T* in, const int* index, i64 rows, int k, i64 cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  sum_indexed_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(out, in, index, rows, k, cols);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void scale_rows(T* out, const T* in, const float* scales, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  scale_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(out, in, scales, rows, cols);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void row_dots(float* out, const T* a, const T* b, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows == 0) return;
  row_dots_kernel<<<grid_for(rows * 32), kThreads, 0, stream>>>(out, a, b, rows, cols);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                 \
  template void sum_indexed_rows<T>(T*, const T*, const int*, i64, int, i64, cudaStream_t); \
  template void scale_rows<T>(T*, const T*, const float*, i64, i64, cudaStream_t);          \
  template void row_dots<T>(float*, const T*, const T*, i64, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
