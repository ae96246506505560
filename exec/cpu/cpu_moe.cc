// The CPU backend's mixture-of-experts row ops: tokens gathered into their experts' order, the k expert
// outputs of each token summed back, router probabilities applied to rows and their gradients. Each
// output row is written by one iteration (no atomics, no reduction across rows): the same bits on every
// thread count.
#include <cstring>

#include "exec/cpu/cpu_backend.h"
#include "exec/cpu/cpu_loops.h"

namespace loom::exec {

namespace {
// Rows per block: a block's rows are one OpenMP task's.
constexpr std::int64_t kRowsPerBlock = 64;

LOOM_CPU_CLONES void sum_rows(float* out, const float* in, const int* index, int k, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c) out[c] = 0.0f;
  for (int j = 0; j < k; ++j) {
    const float* row = in + static_cast<std::int64_t>(index[j]) * cols;
    for (std::int64_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}
LOOM_CPU_CLONES void scale_row(float* out, const float* in, float s, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c) out[c] = s * in[c];
}
LOOM_CPU_CLONES float dot_row(const float* a, const float* b, std::int64_t cols) {
  float sum = 0.0f;
  for (std::int64_t c = 0; c < cols; ++c) sum += a[c] * b[c];
  return sum;
}
}  // namespace

void CpuBackend::index_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, std::int64_t cols) {
  if (out.dtype() != in.dtype())
    throw std::logic_error(std::string("index_rows: ") + to_string(in.dtype()) + " rows into " +
                           to_string(out.dtype()));
  const std::size_t row_bytes = static_cast<std::size_t>(cols * dtype_bytes(in.dtype()));
  auto* dst = static_cast<char*>(out.raw());
  const auto* src = static_cast<const char*>(in.raw());
  for_blocks(rows, kRowsPerBlock, rows * cols, [&](std::int64_t r0, std::int64_t r1, std::int64_t) {
    for (std::int64_t r = r0; r < r1; ++r)
      std::memcpy(dst + static_cast<std::size_t>(r) * row_bytes, src + static_cast<std::size_t>(index[r]) * row_bytes,
                  row_bytes);
  });
}

void CpuBackend::sum_indexed_rows(TensorRef out_r, ConstTensorRef in_r, const int* index, std::int64_t rows, int k,
                                  std::int64_t cols) {
  float* out = f32(out_r, "sum_indexed_rows");
  const float* in = f32(in_r, "sum_indexed_rows");
  for_blocks(rows, kRowsPerBlock, rows * cols * k, [&](std::int64_t r0, std::int64_t r1, std::int64_t) {
    for (std::int64_t r = r0; r < r1; ++r) sum_rows(out + r * cols, in, index + r * k, k, cols);
  });
}

void CpuBackend::scale_rows(TensorRef out_r, ConstTensorRef in_r, const float* scales, std::int64_t rows,
                            std::int64_t cols) {
  float* out = f32(out_r, "scale_rows");
  const float* in = f32(in_r, "scale_rows");
  for_blocks(rows, kRowsPerBlock, rows * cols, [&](std::int64_t r0, std::int64_t r1, std::int64_t) {
    for (std::int64_t r = r0; r < r1; ++r) scale_row(out + r * cols, in + r * cols, scales[r], cols);
  });
}

void CpuBackend::row_dots(float* out, ConstTensorRef a_r, ConstTensorRef b_r, std::int64_t rows, std::int64_t cols) {
  const float* a = f32(a_r, "row_dots");
  const float* b = f32(b_r, "row_dots");
  for_blocks(rows, kRowsPerBlock, rows * cols, [&](std::int64_t r0, std::int64_t r1, std::int64_t) {
    for (std::int64_t r = r0; r < r1; ++r) out[r] = dot_row(a + r * cols, b + r * cols, cols);
  });
}

}  // namespace loom::exec
