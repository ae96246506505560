// Launchers of Loom's CUDA kernels: one per op of exec/backend.h, with the same argument meaning,
// the same overwrite-vs-accumulate behaviour and the same formulas as the CPU backend's op. Pointers
// are device pointers; T is float or __nv_bfloat16 (activations, weights); statistics, norm/bias
// weight gradients and optimizer state are fp32. Everything is queued on `stream`, nothing synchronises.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/numerics.h"

namespace loom::kernels {

using bf16 = __nv_bfloat16;
using i64 = std::int64_t;

// exec::AttentionShape's fields (kernels/ includes nothing of exec/): packed [tokens, q|k|v] rows,
// tokens sequence-major; heads a multiple of kv_heads (GQA).
struct AttentionDims {
  int batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  LOOM_HD i64 qkv_cols() const { return static_cast<i64>(heads + 2 * kv_heads) * head_dim; }
  LOOM_HD i64 probs_numel() const { return static_cast<i64>(batch) * heads * seq * seq; }
};

// --- elementwise.cu: y += alpha·x; out = a + b; x *= alpha; dst = src (a copy); x = 0.
template <class Y, class X>
void axpy(Y* y, float alpha, const X* x, i64 n, cudaStream_t stream);
template <class T>
void add(T* out, const T* a, const T* b, i64 n, cudaStream_t stream);
template <class T>
void scale(T* x, float alpha, i64 n, cudaStream_t stream);
template <class T>
void copy(T* dst, const T* src, i64 n, cudaStream_t stream);
template <class T>
void zero(T* x, i64 n, cudaStream_t stream);

// --- cast.cu: dst = src converted (fp32 → bf16 rounds to nearest even, as kernels/numerics.h).
template <class To, class From>
void cast(To* dst, const From* src, i64 n, cudaStream_t stream);
// dst rows ← src rows (`cols` values each, row strides ld_dst and ld_src), converted: one launch.
template <class To, class From>
void cast_rows(To* dst, i64 ld_dst, const From* src, i64 ld_src, i64 rows, i64 cols, cudaStream_t stream);

// --- bias.cu: x[r, c] += bias[c]; dbias[c] += Σ_r dy[r, c] (accumulates, fp32).
template <class T>
void add_bias(T* x, const T* bias, i64 rows, i64 cols, cudaStream_t stream);
template <class T>
void bias_grad(float* dbias, const T* dy, i64 rows, i64 cols, cudaStream_t stream);

// --- sum_squares.cu: Σ x² in double, deterministic. `out` holds kSumSquaresScratch doubles; the
// result is written to out[0] (added to it with `accumulate`), the rest is scratch.
constexpr int kSumSquaresBlocks = 256;
constexpr int kSumSquaresScratch = kSumSquaresBlocks + 1;
template <class T>
void sum_squares(double* out, const T* x, i64 n, cudaStream_t stream, bool accumulate = false);

// --- layernorm.cu: eps 1e-5; mean/rstd per row (fp32). Backward writes dx, accumulates dw and db.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, i64 rows, i64 cols,
                       cudaStream_t stream);
template <class T>
void layernorm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w, const float* mean,
                        const float* rstd, i64 rows, i64 cols, cudaStream_t stream);

// --- rmsnorm.cu: eps 1e-5; rstd per row. Backward writes dx, accumulates dw.
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* w, i64 rows, i64 cols, cudaStream_t stream);
template <class T>
void rmsnorm_backward(T* dx, float* dw, const T* dout, const T* x, const T* w, const float* rstd, i64 rows, i64 cols,
                      cudaStream_t stream);

// --- gelu.cu: tanh form on n values; the backward writes din = dout·gelu'(in).
template <class T>
void gelu_forward(T* out, const T* in, i64 n, cudaStream_t stream);
template <class T>
void gelu_backward(T* din, const T* in, const T* dout, i64 n, cudaStream_t stream);

// --- swiglu.cu: rows of [gate | up] (2·f values) → f values; the backward writes both halves of din.
template <class T>
void swiglu_forward(T* out, const T* in, i64 rows, i64 f, cudaStream_t stream);
template <class T>
void swiglu_backward(T* din, const T* in, const T* dout, i64 rows, i64 f, cudaStream_t stream);

// --- dropout.cu: mask[i] = keep(key, first + i) from kernels/numerics.h; out = in·mask·scale.
void dropout_mask(std::uint8_t* mask, i64 n, std::uint64_t key, std::uint64_t first, float p, cudaStream_t stream);
template <class T>
void apply_mask(T* out, const T* in, const std::uint8_t* mask, i64 n, float scale, cudaStream_t stream);

// --- residual.cu: out = x + dropout(branch + bias) over rows × cols in one pass (Megatron-LM's fused
// bias-dropout-add): bias (nullptr: none) added per column, then mask (nullptr: none) applied with
// `scale`. Each intermediate is rounded to T as add_bias and apply_mask would store it.
template <class T>
void bias_dropout_add(T* out, const T* x, const T* branch, const T* bias, const std::uint8_t* mask, i64 rows, i64 cols,
                      float scale, cudaStream_t stream);

// --- rope.cu: rotary embedding on the q and k columns of qkv in place; inverse for the backward. Under
// context parallelism each local token at its position in the sequence (context_parallel_position).
template <class T>
void rope(T* qkv, const AttentionDims& s, bool inverse, cudaStream_t stream, int cp = 1, int cp_rank = 0);

// --- cross_entropy.cu: vocabulary-parallel pieces (Megatron). Logits [rows, cols] hold vocabulary
// columns [vocab_start, vocab_start + cols), the first valid_cols of them real tokens.
template <class T>
void row_max(float* out, const T* logits, i64 rows, i64 cols, i64 valid_cols, cudaStream_t stream);
template <class T>
void row_sum_exp(float* out, const T* logits, const float* max, i64 rows, i64 cols, i64 valid_cols,
                 cudaStream_t stream);
// Both in one pass over each row (an online softmax): max[r], and sum_exp[r] relative to it.
template <class T>
void row_max_sum_exp(float* max, float* sum_exp, const T* logits, i64 rows, i64 cols, i64 valid_cols,
                     cudaStream_t stream);
// out[r] = logits[r, target − vocab_start] when this rank holds the target, else 0.
template <class T>
void target_logit(float* out, const T* logits, const int* targets, i64 rows, i64 cols, i64 vocab_start,
                  cudaStream_t stream);
// *total += Σ_r log(sum_exp[r]) + max[r] − target[r], in double, in a fixed order (one block).
void add_token_losses(double* total, const float* max, const float* sum_exp, const float* target, i64 rows,
                      cudaStream_t stream);
// logits ← scale·(softmax − onehot(target)) in place; padded columns get zero.
template <class T>
void cross_entropy_grad(T* logits, const float* max, const float* sum_exp, const int* targets, i64 rows, i64 cols,
                        i64 valid_cols, i64 vocab_start, float scale, cudaStream_t stream);
// The same gradient of fp32 logits written to `out` in bf16 (rounded once), in one pass.
void cross_entropy_grad(bf16* out, const float* logits, const float* max, const float* sum_exp, const int* targets,
                        i64 rows, i64 cols, i64 valid_cols, i64 vocab_start, float scale, cudaStream_t stream);

// --- embedding.cu: rows [vocab_start, vocab_start + rows_held) of the table; other tokens' rows of
// `out` are left unchanged. The backward accumulates into the fp32 gradient table (atomics: the
// order of additions, so the last bits, may differ between runs).
template <class T>
void embedding_forward(T* out, const T* table, const int* tokens, i64 n, i64 cols, i64 vocab_start, i64 rows_held,
                       cudaStream_t stream);
template <class T>
void embedding_backward(float* dtable, const T* dout, const int* tokens, i64 n, i64 cols, i64 vocab_start,
                        i64 rows_held, cudaStream_t stream);

// --- moe.cu: rows moved into their experts' order and back. index_rows: out[i] = in[index[i]], rows of
// `row_bytes` bytes (any dtype). sum_indexed_rows: out[i] = Σ_j in[index[i·k + j]] for j < k, in j order.
// scale_rows: out[i] = scales[i]·in[i] (in may be out). row_dots: out[i] = Σ_c a[i, c]·b[i, c] in fp32.
void index_rows(void* out, const void* in, const int* index, i64 rows, i64 row_bytes, cudaStream_t stream);
template <class T>
void sum_indexed_rows(T* out, const T* in, const int* index, i64 rows, int k, i64 cols, cudaStream_t stream);
template <class T>
void scale_rows(T* out, const T* in, const float* scales, i64 rows, i64 cols, cudaStream_t stream);
template <class T>
void row_dots(float* out, const T* a, const T* b, i64 rows, i64 cols, cudaStream_t stream);

// --- adamw.cu: fp32 master weights, gradient and moments; `step` counts from 1. When `param` is not
// null it receives the updated master rounded to bf16 (the compute copy).
void adamw(float* master, bf16* param, const float* grad, float* m, float* v, i64 n, float lr, float beta1, float beta2,
           float eps, float weight_decay, int step, cudaStream_t stream);

// --- softmax.cu: causal softmax over `rows` rows of `seq` scores (rows = batch·heads·seq, the row's
// position in its sequence is row % seq), in place; columns past the diagonal become 0. The backward
// writes dscores = probs·(g − Σ probs·g) (may alias dprobs), zero past the diagonal, where g is dprobs,
// or with a dropout mask (one byte per score, nullptr for none) dprobs·mask·keep_scale: the gradient
// through the dropout, in the same pass.
template <class T>
void causal_softmax_forward(T* scores, i64 rows, int seq, cudaStream_t stream);
template <class T>
void causal_softmax_backward(T* dscores, const T* probs, const T* dprobs, const std::uint8_t* mask, float keep_scale,
                             i64 rows, int seq, cudaStream_t stream);

}  // namespace loom::kernels
