// Token embedding over a vocabulary range (vocabulary-parallel: rows [vocab_start, vocab_start +
// rows_held) live on this rank): the lookup, and the gradient added into the fp32 table with atomics.
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
template <class T>
__global__ void embedding_forward_kernel(T* out, const T* table, const int* tokens, i64 n, i64 cols, i64 vocab_start,
                                         i64 rows_held) {
  LOOM_GRID_STRIDE(idx, n * cols) {
    const i64 i = idx / cols, c = idx % cols;
    const i64 row = tokens[i] - vocab_start;
    if (row >= 0 && row < rows_held) out[idx] = table[row * cols + c];
  }
}
template <class T>
__global__ void embedding_backward_kernel(float* dtable, const T* dout, const int* tokens, i64 n, i64 cols,
                                          i64 vocab_start, i64 rows_held) {
  LOOM_GRID_STRIDE(idx, n * cols) {
    const i64 i = idx / cols, c = idx % cols;
    const i64 row = tokens[i] - vocab_start;
    if (row >= 0 && row < rows_held) atomicAdd(dtable + row * cols + c, to_float(dout[idx]));
  }
}
}  // namespace

template <class T>
void embedding_forward(T* out, const T* table, const int* tokens, i64 n, i64 cols, i64 vocab_start, i64 rows_held,
                       cudaStream_t stream) {
  if (n * cols == 0) return;
  embedding_forward_kernel<<<grid_for(n * cols), kThreads, 0, stream>>>(out, table, tokens, n, cols, vocab_start,
                                                                        rows_held);
  CUDA_CHECK_LAUNCH();
}
template <class T>
void embedding_backward(float* dtable, const T* dout, const int* tokens, i64 n, i64 cols, i64 vocab_start,
                        i64 rows_held, cudaStream_t stream) {
  if (n * cols == 0) return;
  embedding_backward_kernel<<<grid_for(n * cols), kThreads, 0, stream>>>(dtable, dout, tokens, n, cols, vocab_start,
                                                                         rows_held);
  CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                       \
  template void embedding_forward<T>(T*, const T*, const int*, i64, i64, i64, i64, cudaStream_t); \
  template void embedding_backward<T>(float*, const T*, const int*, i64, i64, i64, i64, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
