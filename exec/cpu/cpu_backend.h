// CPU backend: host memory, GEMM through OpenBLAS's sgemm when it is linked (else Eigen), and the
// model's element-wise, normalisation, attention and loss ops written as plain loops (OpenMP-parallel
// where available). It is also the reference the CUDA kernels are tested against.
#pragma once

#include <unordered_map>
#include <vector>

#include "exec/backend.h"

namespace loom::exec {

// Which GEMM the CPU backend uses: "openblas" or "eigen" (chosen at build time).
const char* cpu_gemm_library();
// Eigen's GEMM, always compiled, so the benchmark can compare it with the BLAS one.
void eigen_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc);

// Threads used by the BLAS and the OpenMP loops of this process.
void set_cpu_threads(int threads);

class CpuBackend final : public Backend {
 public:
  CpuBackend() = default;
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  void to_host(float* host, const float* src, std::int64_t n) override { copy(host, src, n); }
  void from_host(float* dst, const float* host, std::int64_t n) override { copy(dst, host, n); }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc) override;

  void zero(float* x, std::int64_t n) override;
  void copy(float* dst, const float* src, std::int64_t n) override;
  void axpy(float* y, float alpha, const float* x, std::int64_t n) override;
  void add(float* out, const float* a, const float* b, std::int64_t n) override;
  void add_bias(float* x, const float* bias, std::int64_t rows, std::int64_t cols) override;
  void bias_grad(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols) override;
  double sum_squares(const float* x, std::int64_t n) override;
  void scale(float* x, float alpha, std::int64_t n) override;

  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                         std::int64_t rows, std::int64_t cols) override;
  void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                          const float* mean, const float* rstd, std::int64_t rows, std::int64_t cols) override;
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, std::int64_t rows,
                       std::int64_t cols) override;
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        std::int64_t rows, std::int64_t cols) override;

  void gelu_forward(float* out, const float* in, std::int64_t n) override;
  void gelu_backward(float* din, const float* in, const float* dout, std::int64_t n) override;
  void swiglu_forward(float* out, const float* in, std::int64_t rows, std::int64_t f) override;
  void swiglu_backward(float* din, const float* in, const float* dout, std::int64_t rows, std::int64_t f) override;

  using Backend::attention_backward;
  void attention_probs(float* probs, const float* qkv, const AttentionShape& s) override;
  void attention_context(float* ctx, const float* probs, const float* qkv, const AttentionShape& s) override;
  void attention_backward(float* dqkv, const float* dctx, const float* probs, const float* dropped,
                          const std::uint8_t* mask, float keep_scale, const float* qkv,
                          const AttentionShape& s) override;
  void dropout_mask(std::uint8_t* mask, std::int64_t n, std::uint64_t key, std::uint64_t first, float p) override;
  void apply_mask(float* out, const float* in, const std::uint8_t* mask, std::int64_t n, float scale) override;
  void rope(float* qkv, const AttentionShape& s, bool inverse) override;

  void row_max(float* out, const float* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid_cols) override;
  void row_sum_exp(float* out, const float* logits, const float* max, std::int64_t rows, std::int64_t cols,
                   std::int64_t valid_cols) override;
  void target_logit(float* out, const float* logits, const int* targets, std::int64_t rows, std::int64_t cols,
                    std::int64_t vocab_start) override;
  void cross_entropy_grad(float* logits, const float* max, const float* sum_exp, const int* targets, std::int64_t rows,
                          std::int64_t cols, std::int64_t valid_cols, std::int64_t vocab_start, float scale) override;
  void embedding_forward(float* out, const float* table, const int* tokens, std::int64_t n, std::int64_t cols,
                         std::int64_t vocab_start, std::int64_t rows_held) override;
  void embedding_backward(float* dtable, const float* dout, const int* tokens, std::int64_t n, std::int64_t cols,
                          std::int64_t vocab_start, std::int64_t rows_held) override;

  void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, int step) override;

 protected:
  float* allocate_raw(std::int64_t bytes) override;
  void free_raw(float* data) override;

 private:
  std::unordered_map<std::size_t, std::vector<float*>> free_blocks_;
  std::unordered_map<float*, std::size_t> block_sizes_;
};

}  // namespace loom::exec
