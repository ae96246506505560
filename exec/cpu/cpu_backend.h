// CPU backend: host memory, GEMM through OpenBLAS's sgemm when it is linked (else Eigen), and the
// model's element-wise, normalisation, attention and loss ops written as plain loops (OpenMP-parallel
// where available). It is also the reference the CUDA kernels are tested against.
#pragma once

#include <cstring>

#include <unordered_map>
#include <vector>

#include "exec/backend.h"

namespace loom::exec {

// Which GEMM the CPU backend uses: "openblas (openmp)", "openblas (pthreads)" (its own thread pool beside
// OpenMP's: see exec/README.md's "Threads"), or "eigen" (chosen at build time).
const char* cpu_gemm_library();
// Eigen's GEMM, always compiled, so the benchmark can compare it with the BLAS one.
void eigen_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc);

// Threads used by the BLAS and the OpenMP loops of this process.
void set_cpu_threads(int threads);

// The fp32 pointer behind a view; a view of another dtype is an executor bug (std::logic_error naming the
// op and the dtype): the CPU backend computes in fp32 only, apart from casts and AdamW's copy.
float* f32(TensorRef r, const char* op);
const float* f32(ConstTensorRef r, const char* op);

class CpuBackend : public Backend {
 public:
  CpuBackend() = default;
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  // Host memory is the backend's: the copies are casts.
  void to_host(float* host, ConstTensorRef src, std::int64_t n) override { cast(host, src, n); }
  void from_host(TensorRef dst, const float* host, std::int64_t n) override { cast(dst, host, n); }
  void download(void* host, ConstTensorRef src, std::int64_t n) override {
    if (n > 0) std::memcpy(host, src.raw(), static_cast<std::size_t>(n) * dtype_bytes(src.dtype()));
  }
  void upload(TensorRef dst, const void* host, std::int64_t n) override {
    if (n > 0) std::memcpy(dst.raw(), host, static_cast<std::size_t>(n) * dtype_bytes(dst.dtype()));
  }
  void cast(TensorRef dst, ConstTensorRef src, std::int64_t n) override;
  void evict_from_cache(ConstTensorRef x, std::int64_t bytes) override;

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a, int lda, ConstTensorRef b,
            int ldb, float beta, TensorRef c, int ldc) override;

  void zero(TensorRef x, std::int64_t n) override;
  void copy(TensorRef dst, ConstTensorRef src, std::int64_t n) override;
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
  // Query rows per block of the causal attention (cpu_attention.cc): 128 keep each GEMM large enough for
  // the BLAS's packed kernels while the products above the diagonal are skipped.
  static constexpr int kAttentionQueryBlock = 128;
  int attention_query_block() const override { return kAttentionQueryBlock; }
  void attention_probs(TensorRef probs, ConstTensorRef qkv, const AttentionShape& s) override;
  void attention_context(TensorRef ctx, ConstTensorRef probs, ConstTensorRef qkv, const AttentionShape& s) override;
  void attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef probs, ConstTensorRef dropped,
                          const std::uint8_t* mask, float keep_scale, ConstTensorRef qkv,
                          const AttentionShape& s) override;
  void dropout_mask(std::uint8_t* mask, std::int64_t n, std::uint64_t key, std::uint64_t first, float p) override;
  void apply_mask(TensorRef out, ConstTensorRef in, const std::uint8_t* mask, std::int64_t n, float scale) override;
  void attention_block_forward(float* acc, float* row_max, float* row_sum, ConstTensorRef qkv, ConstTensorRef kv,
                               int kv_ld, int kv_rank, const AttentionShape& s, const AttentionDropout& drop) override;
  void attention_block_finish(TensorRef ctx, float* lse, const float* acc, const float* row_max, const float* row_sum,
                              const AttentionShape& s) override;
  void attention_block_backward(float* dq, TensorRef dkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse,
                                ConstTensorRef qkv, ConstTensorRef kv, int kv_ld, int kv_rank, const AttentionShape& s,
                                const AttentionDropout& drop) override;
  void rope(TensorRef qkv, const AttentionShape& s, bool inverse) override;

  void row_max(float* out, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
               std::int64_t valid_cols) override;
  void row_sum_exp(float* out, ConstTensorRef logits, const float* max, std::int64_t rows, std::int64_t cols,
                   std::int64_t valid_cols) override;
  // Row by row: a row's max, then its sum while the row is still in cache (one read of the logits from
  // memory), the same values as row_max then row_sum_exp.
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

  void index_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, std::int64_t cols) override;
  void sum_indexed_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, int k,
                        std::int64_t cols) override;
  void scale_rows(TensorRef out, ConstTensorRef in, const float* scales, std::int64_t rows, std::int64_t cols) override;
  void row_dots(float* out, ConstTensorRef a, ConstTensorRef b, std::int64_t rows, std::int64_t cols) override;

  using Backend::adamw;
  void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, int step, TensorRef param_copy) override;

 protected:
  // Values the GPU's unfused attention stores in the compute dtype between its kernels (the scores before
  // the softmax; dP, its dropout and dS in the backward; the K and V gradients after each head of a GQA
  // group): as they are here, in fp32; rounded to bf16 by the bf16 emulation, so that it rounds where the
  // CUDA backend does. A rows × cols block with leading dimension ld.
  virtual void round_stored(float* /*x*/, std::int64_t /*rows*/, std::int64_t /*cols*/, std::int64_t /*ld*/) {}
  void* allocate_raw(std::int64_t bytes) override;
  void free_raw(void* data) override;

 private:
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks_;
  std::unordered_map<void*, std::size_t> block_sizes_;
};

}  // namespace loom::exec
