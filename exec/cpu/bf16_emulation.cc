// CpuBf16Backend: every op of the compute path with its bf16 views widened to fp32 scratch on the way in
// and its bf16 outputs rounded back on the way out; fp32 views (statistics, main gradients) pass as they are.
#include "exec/cpu/bf16_emulation.h"

#include "kernels/numerics.h"

#include <algorithm>
#include <span>
#include <vector>

namespace loom::exec {

namespace {

// Elements a strided row-major matrix view spans.
std::int64_t extent(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}
std::int64_t tokens(const AttentionShape& s) { return static_cast<std::int64_t>(s.batch) * s.seq; }

// An fp32 view of an op's input: the view itself when fp32, else its n values widened into scratch.
class In {
 public:
  In(CpuBackend& backend, ConstTensorRef ref, std::int64_t n) : ref_(ref) {
    if (ref.null() || ref.dtype() == DType::kF32) return;
    scratch_.resize(static_cast<std::size_t>(n));
    backend.CpuBackend::cast(scratch_.data(), ref, n);
    ref_ = scratch_.data();
  }
  operator ConstTensorRef() const { return ref_; }  // NOLINT(google-explicit-constructor)

 private:
  ConstTensorRef ref_;
  std::vector<float> scratch_;
};

// An fp32 view of an op's output: a bf16 one is computed in fp32 scratch (holding its values first when
// the op reads them too) and rounded to nearest even into the view when the op is done.
class Out {
 public:
  Out(CpuBackend& backend, TensorRef ref, std::int64_t n, bool read) : backend_(backend), dst_(ref), ref_(ref), n_(n) {
    if (ref.null() || ref.dtype() == DType::kF32) return;
    scratch_.resize(static_cast<std::size_t>(n));
    if (read) backend.CpuBackend::cast(scratch_.data(), ref, n);
    ref_ = scratch_.data();
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  ~Out() {
    if (!scratch_.empty()) backend_.CpuBackend::cast(dst_, scratch_.data(), n_);
  }
  operator TensorRef() const { return ref_; }  // NOLINT(google-explicit-constructor)

 private:
  CpuBackend& backend_;
  TensorRef dst_, ref_;
  std::int64_t n_;
  std::vector<float> scratch_;
};

}  // namespace

void CpuBf16Backend::round_stored(float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (float& v : std::span(x + r * ld, static_cast<std::size_t>(cols)))
      v = kernels::float_from_bf16_bits(kernels::bf16_bits_from_float(v));
}

void CpuBf16Backend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a, int lda,
                          ConstTensorRef b, int ldb, float beta, TensorRef c, int ldc) {
  In a32(*this, a, trans_a ? extent(k, m, lda) : extent(m, k, lda));
  In b32(*this, b, trans_b ? extent(n, k, ldb) : extent(k, n, ldb));
  // A strided output (a column block of a wider tensor) is read too: the columns between its rows stay.
  Out c32(*this, c, extent(m, n, ldc), beta != 0.0f || (m > 1 && ldc != n));
  CpuBackend::gemm(trans_a, trans_b, m, n, k, alpha, a32, lda, b32, ldb, beta, c32, ldc);
}

void CpuBf16Backend::axpy(TensorRef y, float alpha, ConstTensorRef x, std::int64_t n) {
  In x32(*this, x, n);
  Out y32(*this, y, n, true);
  CpuBackend::axpy(y32, alpha, x32, n);
}
void CpuBf16Backend::add(TensorRef out, ConstTensorRef a, ConstTensorRef b, std::int64_t n) {
  In a32(*this, a, n), b32(*this, b, n);
  Out o32(*this, out, n, false);
  CpuBackend::add(o32, a32, b32, n);
}
void CpuBf16Backend::add_bias(TensorRef x, ConstTensorRef bias, std::int64_t rows, std::int64_t cols) {
  In b32(*this, bias, cols);
  Out x32(*this, x, rows * cols, true);
  CpuBackend::add_bias(x32, b32, rows, cols);
}
void CpuBf16Backend::bias_grad(float* dbias, ConstTensorRef dy, std::int64_t rows, std::int64_t cols) {
  CpuBackend::bias_grad(dbias, In(*this, dy, rows * cols), rows, cols);
}
double CpuBf16Backend::sum_squares(ConstTensorRef x, std::int64_t n) {
  return CpuBackend::sum_squares(In(*this, x, n), n);
}
void CpuBf16Backend::scale(TensorRef x, float alpha, std::int64_t n) {
  Out x32(*this, x, n, true);
  CpuBackend::scale(x32, alpha, n);
}

void CpuBf16Backend::layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef x, ConstTensorRef w,
                                       ConstTensorRef b, std::int64_t rows, std::int64_t cols) {
  In x32(*this, x, rows * cols), w32(*this, w, cols), b32(*this, b, cols);
  Out o32(*this, out, rows * cols, false);
  CpuBackend::layernorm_forward(o32, mean, rstd, x32, w32, b32, rows, cols);
}
void CpuBf16Backend::layernorm_backward(TensorRef dx, float* dw, float* db, ConstTensorRef dout, ConstTensorRef x,
                                        ConstTensorRef w, const float* mean, const float* rstd, std::int64_t rows,
                                        std::int64_t cols) {
  In d32(*this, dout, rows * cols), x32(*this, x, rows * cols), w32(*this, w, cols);
  Out dx32(*this, dx, rows * cols, false);
  CpuBackend::layernorm_backward(dx32, dw, db, d32, x32, w32, mean, rstd, rows, cols);
}
void CpuBf16Backend::rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef x, ConstTensorRef w, std::int64_t rows,
                                     std::int64_t cols) {
  In x32(*this, x, rows * cols), w32(*this, w, cols);
  Out o32(*this, out, rows * cols, false);
  CpuBackend::rmsnorm_forward(o32, rstd, x32, w32, rows, cols);
}
void CpuBf16Backend::rmsnorm_backward(TensorRef dx, float* dw, ConstTensorRef dout, ConstTensorRef x, ConstTensorRef w,
                                      const float* rstd, std::int64_t rows, std::int64_t cols) {
  In d32(*this, dout, rows * cols), x32(*this, x, rows * cols), w32(*this, w, cols);
  Out dx32(*this, dx, rows * cols, false);
  CpuBackend::rmsnorm_backward(dx32, dw, d32, x32, w32, rstd, rows, cols);
}

void CpuBf16Backend::gelu_forward(TensorRef out, ConstTensorRef in, std::int64_t n) {
  In i32(*this, in, n);
  Out o32(*this, out, n, false);
  CpuBackend::gelu_forward(o32, i32, n);
}
void CpuBf16Backend::gelu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t n) {
  In i32(*this, in, n), d32(*this, dout, n);
  Out o32(*this, din, n, false);
  CpuBackend::gelu_backward(o32, i32, d32, n);
}
void CpuBf16Backend::swiglu_forward(TensorRef out, ConstTensorRef in, std::int64_t rows, std::int64_t f) {
  In i32(*this, in, rows * 2 * f);
  Out o32(*this, out, rows * f, false);
  CpuBackend::swiglu_forward(o32, i32, rows, f);
}
void CpuBf16Backend::swiglu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t rows,
                                     std::int64_t f) {
  In i32(*this, in, rows * 2 * f), d32(*this, dout, rows * f);
  Out o32(*this, din, rows * 2 * f, false);
  CpuBackend::swiglu_backward(o32, i32, d32, rows, f);
}

void CpuBf16Backend::attention_probs(TensorRef probs, ConstTensorRef qkv, const AttentionShape& s) {
  In q32(*this, qkv, tokens(s) * s.qkv_cols());
  Out p32(*this, probs, s.probs_numel(), false);
  CpuBackend::attention_probs(p32, q32, s);
}
void CpuBf16Backend::attention_context(TensorRef ctx, ConstTensorRef probs, ConstTensorRef qkv,
                                       const AttentionShape& s) {
  In p32(*this, probs, s.probs_numel()), q32(*this, qkv, tokens(s) * s.qkv_cols());
  Out c32(*this, ctx, tokens(s) * s.heads * s.head_dim, false);
  CpuBackend::attention_context(c32, p32, q32, s);
}
void CpuBf16Backend::attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef probs,
                                        ConstTensorRef dropped, const std::uint8_t* mask, float keep_scale,
                                        ConstTensorRef qkv, const AttentionShape& s) {
  In dc32(*this, dctx, tokens(s) * s.heads * s.head_dim), p32(*this, probs, s.probs_numel());
  In dr32(*this, dropped, s.probs_numel()), q32(*this, qkv, tokens(s) * s.qkv_cols());
  Out d32(*this, dqkv, tokens(s) * s.qkv_cols(), false);
  CpuBackend::attention_backward(d32, dc32, p32, dr32, mask, keep_scale, q32, s);
}
void CpuBf16Backend::attention_block_forward(float* acc, float* row_max, float* row_sum, ConstTensorRef qkv,
                                             ConstTensorRef kv, int kv_ld, int kv_rank, const AttentionShape& s,
                                             const AttentionDropout& drop) {
  In q32(*this, qkv, tokens(s) * s.qkv_cols()), kv32(*this, kv, extent(tokens(s), 2 * s.kv_heads * s.head_dim, kv_ld));
  CpuBackend::attention_block_forward(acc, row_max, row_sum, q32, kv32, kv_ld, kv_rank, s, drop);
}
void CpuBf16Backend::attention_block_finish(TensorRef ctx, float* lse, const float* acc, const float* row_max,
                                            const float* row_sum, const AttentionShape& s) {
  Out c32(*this, ctx, tokens(s) * s.heads * s.head_dim, false);
  CpuBackend::attention_block_finish(c32, lse, acc, row_max, row_sum, s);
}
void CpuBf16Backend::attention_block_backward(float* dq, TensorRef dkv, ConstTensorRef dctx, ConstTensorRef ctx,
                                              const float* lse, ConstTensorRef qkv, ConstTensorRef kv, int kv_ld,
                                              int kv_rank, const AttentionShape& s, const AttentionDropout& drop) {
  const std::int64_t kv_n = extent(tokens(s), 2 * s.kv_heads * s.head_dim, kv_ld),
                     ctx_n = tokens(s) * s.heads * s.head_dim;
  In dc32(*this, dctx, ctx_n), c32(*this, ctx, ctx_n), q32(*this, qkv, tokens(s) * s.qkv_cols()), kv32(*this, kv, kv_n);
  Out d32(*this, dkv, kv_n, true);
  CpuBackend::attention_block_backward(dq, d32, dc32, c32, lse, q32, kv32, kv_ld, kv_rank, s, drop);
}
void CpuBf16Backend::apply_mask(TensorRef out, ConstTensorRef in, const std::uint8_t* mask, std::int64_t n,
                                float scale) {
  In i32(*this, in, n);
  Out o32(*this, out, n, false);
  CpuBackend::apply_mask(o32, i32, mask, n, scale);
}
void CpuBf16Backend::rope(TensorRef qkv, const AttentionShape& s, bool inverse) {
  Out q32(*this, qkv, tokens(s) * s.qkv_cols(), true);
  CpuBackend::rope(q32, s, inverse);
}

void CpuBf16Backend::row_max(float* out, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                             std::int64_t valid_cols) {
  CpuBackend::row_max(out, In(*this, logits, rows * cols), rows, cols, valid_cols);
}
void CpuBf16Backend::row_sum_exp(float* out, ConstTensorRef logits, const float* max, std::int64_t rows,
                                 std::int64_t cols, std::int64_t valid_cols) {
  CpuBackend::row_sum_exp(out, In(*this, logits, rows * cols), max, rows, cols, valid_cols);
}
void CpuBf16Backend::row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits, std::int64_t rows,
                                     std::int64_t cols, std::int64_t valid_cols) {
  CpuBackend::row_max_sum_exp(max, sum_exp, In(*this, logits, rows * cols), rows, cols, valid_cols);
}
void CpuBf16Backend::target_logit(float* out, ConstTensorRef logits, const int* targets, std::int64_t rows,
                                  std::int64_t cols, std::int64_t vocab_start) {
  CpuBackend::target_logit(out, In(*this, logits, rows * cols), targets, rows, cols, vocab_start);
}
void CpuBf16Backend::cross_entropy_grad(TensorRef logits, const float* max, const float* sum_exp, const int* targets,
                                        std::int64_t rows, std::int64_t cols, std::int64_t valid_cols,
                                        std::int64_t vocab_start, float scale) {
  Out l32(*this, logits, rows * cols, true);
  CpuBackend::cross_entropy_grad(l32, max, sum_exp, targets, rows, cols, valid_cols, vocab_start, scale);
}
void CpuBf16Backend::embedding_forward(TensorRef out, ConstTensorRef table, const int* tokens, std::int64_t n,
                                       std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) {
  In t32(*this, table, rows_held * cols);
  Out o32(*this, out, n * cols, true);  // rows of tokens other ranks hold stay as they are
  CpuBackend::embedding_forward(o32, t32, tokens, n, cols, vocab_start, rows_held);
}
void CpuBf16Backend::embedding_backward(float* dtable, ConstTensorRef dout, const int* tokens, std::int64_t n,
                                        std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) {
  CpuBackend::embedding_backward(dtable, In(*this, dout, n * cols), tokens, n, cols, vocab_start, rows_held);
}

void CpuBf16Backend::sum_indexed_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, int k,
                                      std::int64_t cols) {
  std::int64_t in_rows = 0;  // rows of `in` the indices reach
  for (std::int64_t i = 0; i < rows * k; ++i) in_rows = std::max<std::int64_t>(in_rows, index[i] + 1);
  In i32(*this, in, in_rows * cols);
  Out o32(*this, out, rows * cols, false);
  CpuBackend::sum_indexed_rows(o32, i32, index, rows, k, cols);
}
void CpuBf16Backend::scale_rows(TensorRef out, ConstTensorRef in, const float* scales, std::int64_t rows,
                                std::int64_t cols) {
  In i32(*this, in, rows * cols);
  Out o32(*this, out, rows * cols, false);
  CpuBackend::scale_rows(o32, i32, scales, rows, cols);
}
void CpuBf16Backend::row_dots(float* out, ConstTensorRef a, ConstTensorRef b, std::int64_t rows, std::int64_t cols) {
  CpuBackend::row_dots(out, In(*this, a, rows * cols), In(*this, b, rows * cols), rows, cols);
}

}  // namespace loom::exec
