// Rotary position embedding in place on the q and k heads of a packed [tokens, q|k|v] matrix (v is
// left alone), half-split pairs (i, i + d/2), angle from kernels/activations.h; inverse turns back.
#include "kernels/activations.h"
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
// One thread per (token row, q/k head, pair i).
template <class T>
__global__ void rope_kernel(T* qkv, AttentionDims s, bool inverse, int cp, int cp_rank) {
  const int half = s.head_dim / 2;
  const int rotated_heads = s.heads + s.kv_heads;
  const i64 n = static_cast<i64>(s.batch) * s.seq * rotated_heads * half;
  const i64 ld = s.qkv_cols();
  LOOM_GRID_STRIDE(idx, n) {
    const int i = static_cast<int>(idx % half);
    const i64 head_row = idx / half;
    const int h = static_cast<int>(head_row % rotated_heads);
    const i64 row = head_row / rotated_heads;
    const int pos = context_parallel_position(static_cast<int>(row % s.seq), s.seq, cp, cp_rank);
    double sin_theta, cos_theta;
    sincos(rope_angle(pos, i, s.head_dim), &sin_theta, &cos_theta);
    const float c = static_cast<float>(cos_theta);
    const float sn = inverse ? -static_cast<float>(sin_theta) : static_cast<float>(sin_theta);
    T* x = qkv + row * ld + static_cast<i64>(h) * s.head_dim;
    const float a = to_float(x[i]), b = to_float(x[i + half]);
    x[i] = from_float<T>(a * c - b * sn);
    x[i + half] = from_float<T>(b * c + a * sn);
  }
}
}  // namespace

template <class T>
void rope(T* qkv, const AttentionDims& s, bool inverse, cudaStream_t stream, int cp, int cp_rank) {
  const i64 n = static_cast<i64>(s.batch) * s.seq * (s.heads + s.kv_heads) * (s.head_dim / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(qkv, s, inverse, cp, cp_rank);
  CUDA_CHECK_LAUNCH();
}

template void rope<float>(float*, const AttentionDims&, bool, cudaStream_t, int, int);
template void rope<bf16>(bf16*, const AttentionDims&, bool, cudaStream_t, int, int);

}  // namespace loom::kernels
