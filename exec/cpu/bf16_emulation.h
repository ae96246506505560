// CpuBf16Backend: the CPU backend with bf16 as its compute dtype, an emulation for tests and rehearsal
// (`loom run --backend cpu-bf16`): each op widens its bf16 inputs to fp32, runs the fp32 CPU op and rounds
// its bf16 outputs to nearest even — what a bf16 GPU kernel with fp32 math does. Slower than `cpu`.
#pragma once

#include "exec/cpu/cpu_backend.h"

namespace loom::exec {

class CpuBf16Backend final : public CpuBackend {
 public:
  std::string name() const override { return "cpu-bf16"; }
  DType compute_dtype() const override { return DType::kBF16; }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a, int lda, ConstTensorRef b,
            int ldb, float beta, TensorRef c, int ldc) override;

  void axpy(TensorRef y, float alpha, ConstTensorRef x, std::int64_t n) override;
  void add(TensorRef out, ConstTensorRef a, ConstTensorRef b, std::int64_t n) override;
  void add_bias(TensorRef x, ConstTensorRef bias, std::int64_t rows, std::int64_t cols) override;
  void bias_grad(float* dbias, ConstTensorRef dy, std::int64_t rows, std::int64_t cols) override;
  double sum_squares(ConstTensorRef x, std::int64_t n) override;
  void scale(TensorRef x, float alpha, std::int64_t n) override;

  void layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef x, ConstTensorRef w, ConstTensorRef b,
                         std::int64_t rows, std::int64_t cols) override;
  void layernorm_backward(TensorRef dx, float* dw, float* db, ConstTensorRef dout, ConstTensorRef x, ConstTensorRef w,
                          const float* mean, const float* rstd, std::int64_t rows, std::int64_t cols) override;
  void rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef x, ConstTensorRef w, std::int64_t rows,
                       std::int64_t cols) override;
  void rmsnorm_backward(TensorRef dx, float* dw, ConstTensorRef dout, ConstTensorRef x, ConstTensorRef w,
                        const float* rstd, std::int64_t rows, std::int64_t cols) override;

  void gelu_forward(TensorRef out, ConstTensorRef in, std::int64_t n) override;
  void gelu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t n) override;
  void swiglu_forward(TensorRef out, ConstTensorRef in, std::int64_t rows, std::int64_t f) override;
  void swiglu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t rows,
                       std::int64_t f) override;

  using Backend::attention_backward;
  void attention_probs(TensorRef probs, ConstTensorRef qkv, const AttentionShape& s) override;
  void attention_context(TensorRef ctx, ConstTensorRef probs, ConstTensorRef qkv, const AttentionShape& s) override;
  void attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef probs, ConstTensorRef dropped,
                          const std::uint8_t* mask, float keep_scale, ConstTensorRef qkv,
                          const AttentionShape& s) override;
  void attention_block_forward(float* acc, float* row_max, float* row_sum, ConstTensorRef qkv, ConstTensorRef kv,
                               int kv_ld, int kv_rank, const AttentionShape& s, const AttentionDropout& drop) override;
  void attention_block_finish(TensorRef ctx, float* lse, const float* acc, const float* row_max, const float* row_sum,
                              const AttentionShape& s) override;
  void attention_block_backward(float* dq, TensorRef dkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse,
                                ConstTensorRef qkv, ConstTensorRef kv, int kv_ld, int kv_rank, const AttentionShape& s,
                                const AttentionDropout& drop) override;
  void apply_mask(TensorRef out, ConstTensorRef in, const std::uint8_t* mask, std::int64_t n, float scale) override;
  void rope(TensorRef qkv, const AttentionShape& s, bool inverse) override;

  void row_max(float* out, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
               std::int64_t valid_cols) override;
  void row_sum_exp(float* out, ConstTensorRef logits, const float* max, std::int64_t rows, std::int64_t cols,
                   std::int64_t valid_cols) override;
  void row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                       std::int64_t valid_cols) override;
  void target_logit(float* out, ConstTensorRef logits, const int* targets, std::int64_t rows, std::int64_t cols,
                    std::int64_t vocab_start) override;
  void cross_entropy_grad(TensorRef logits, const float* max, const float* sum_exp, const int* targets,
                          std::int64_t rows, std::int64_t cols, std::int64_t valid_cols, std::int64_t vocab_start,
                          float scale) override;
  void embedding_forward(TensorRef out, ConstTensorRef table, const int* tokens, std::int64_t n, std::int64_t cols,
                         std::int64_t vocab_start, std::int64_t rows_held) override;
  void embedding_backward(float* dtable, ConstTensorRef dout, const int* tokens, std::int64_t n, std::int64_t cols,
                          std::int64_t vocab_start, std::int64_t rows_held) override;

  // index_rows moves values of any dtype as they are: the CPU backend's serves.
  void sum_indexed_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, int k,
                        std::int64_t cols) override;
  void scale_rows(TensorRef out, ConstTensorRef in, const float* scales, std::int64_t rows, std::int64_t cols) override;
  void row_dots(float* out, ConstTensorRef a, ConstTensorRef b, std::int64_t rows, std::int64_t cols) override;

 protected:
  void round_stored(float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) override;
};

}  // namespace loom::exec
