// CUDA backend: bf16 compute with fp32 statistics, main gradients and optimizer state; every op queued on
// one non-blocking stream through kernels/ (cuBLASLt GEMMs, one kernel per op), device memory from a
// caching allocator charged to the same MemoryTracker categories as on the CPU. Host-only header (no
// CUDA includes), compiled into loom_exec only in builds with CUDA (LOOM_WITH_CUDA).
#pragma once

#include <memory>
#include <string>

#include "exec/backend.h"
#include "exec/cuda/device_allocator.h"

struct CUstream_st;  // cudaStream_t

namespace loom::kernels {
class Gemm;
}

namespace loom::exec {

class CudaBackend final : public Backend {
 public:
  // Call make_cuda_backend, which checks for a device and makes `device` current first.
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  int device() const override { return device_; }
  DType compute_dtype() const override { return DType::kBF16; }
  // The stream every op is queued on (a cudaStream_t): a communicator on the same device orders its
  // own streams after it with events (exec/nccl/nccl_communicator.h).
  CUstream_st* stream() const { return stream_; }
  // 16 bytes (NCCL refuses two ranks on one GPU: exec/comm_path.h).
  std::string device_uuid() const override;
  double peak_flops() const override;
  std::map<std::string, std::string> device_provenance() const override;
  // Device memory the allocator holds (in use + cached), beside the tracker's per-category bytes.
  const DeviceAllocator& allocator() const { return *allocator_; }
  DeviceAllocator& allocator() { return *allocator_; }

  void to_host(float* host, ConstTensorRef src, std::int64_t n) override;
  void from_host(TensorRef dst, const float* host, std::int64_t n) override;
  void download(void* host, ConstTensorRef src, std::int64_t n) override;
  void upload(TensorRef dst, const void* host, std::int64_t n) override;
  void copy_rows(TensorRef dst, std::int64_t ld_dst, ConstTensorRef src, std::int64_t ld_src, std::int64_t rows,
                 std::int64_t cols) override;
  void cast(TensorRef dst, ConstTensorRef src, std::int64_t n) override;
  void synchronize() override;
  std::unique_ptr<Event> record_event() override;
  std::unique_ptr<TimedEvent> record_timed_event() override;

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a, int lda, ConstTensorRef b,
            int ldb, float beta, TensorRef c, int ldc) override;

  void zero(TensorRef x, std::int64_t n) override;
  void copy(TensorRef dst, ConstTensorRef src, std::int64_t n) override;
  void axpy(TensorRef y, float alpha, ConstTensorRef x, std::int64_t n) override;
  void add(TensorRef out, ConstTensorRef a, ConstTensorRef b, std::int64_t n) override;
  void add_bias(TensorRef x, ConstTensorRef bias, std::int64_t rows, std::int64_t cols) override;
  void bias_grad(float* dbias, ConstTensorRef dy, std::int64_t rows, std::int64_t cols) override;
  double sum_squares(ConstTensorRef x, std::int64_t n) override;
  void sum_squares_reset() override;
  void sum_squares_add(ConstTensorRef x, std::int64_t n) override;
  double sum_squares_result() override;
  void loss_reset() override;
  void loss_add(const float* max, const float* sum_exp, const float* target, std::int64_t rows) override;
  double loss_result() override;
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
  void dropout_mask(std::uint8_t* mask, std::int64_t n, std::uint64_t key, std::uint64_t first, float p) override;
  void apply_mask(TensorRef out, ConstTensorRef in, const std::uint8_t* mask, std::int64_t n, float scale) override;
  void bias_dropout_add(TensorRef out, ConstTensorRef x, TensorRef branch, ConstTensorRef bias,
                        const std::uint8_t* mask, std::int64_t rows, std::int64_t cols, float scale) override;
  void rope(TensorRef qkv, const AttentionShape& s, bool inverse) override;

  void row_max(float* out, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
               std::int64_t valid_cols) override;
  void row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                       std::int64_t valid_cols) override;
  void row_sum_exp(float* out, ConstTensorRef logits, const float* max, std::int64_t rows, std::int64_t cols,
                   std::int64_t valid_cols) override;
  void target_logit(float* out, ConstTensorRef logits, const int* targets, std::int64_t rows, std::int64_t cols,
                    std::int64_t vocab_start) override;
  void cross_entropy_grad_into(TensorRef out, TensorRef logits, const float* max, const float* sum_exp,
                               const int* targets, std::int64_t rows, std::int64_t cols, std::int64_t valid_cols,
                               std::int64_t vocab_start, float scale) override;
  void cross_entropy_grad(TensorRef logits, const float* max, const float* sum_exp, const int* targets,
                          std::int64_t rows, std::int64_t cols, std::int64_t valid_cols, std::int64_t vocab_start,
                          float scale) override;
  void index_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, std::int64_t cols) override;
  void sum_indexed_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, int k,
                        std::int64_t cols) override;
  void scale_rows(TensorRef out, ConstTensorRef in, const float* scales, std::int64_t rows, std::int64_t cols) override;
  void row_dots(float* out, ConstTensorRef a, ConstTensorRef b, std::int64_t rows, std::int64_t cols) override;
  void embedding_forward(TensorRef out, ConstTensorRef table, const int* tokens, std::int64_t n, std::int64_t cols,
                         std::int64_t vocab_start, std::int64_t rows_held) override;
  void embedding_backward(float* dtable, ConstTensorRef dout, const int* tokens, std::int64_t n, std::int64_t cols,
                          std::int64_t vocab_start, std::int64_t rows_held) override;

  using Backend::adamw;
  void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, int step, TensorRef param_copy) override;

 protected:
  void* allocate_raw(std::int64_t bytes) override;
  void free_raw(void* data) override;

 private:
  // Token ids on the device: `host_or_device` itself when it is device memory, else a copy queued on
  // the stream into a scratch buffer (the data loader's token vectors live on the host).
  const int* device_ints(const int* host_or_device, std::int64_t n);

  int device_ = 0;
  CUstream_st* stream_ = nullptr;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<kernels::Gemm> gemm_;
  void* ints_ = nullptr;  // device scratch for token ids, from the allocator
  std::int64_t ints_capacity_ = 0;
  double* sum_squares_scratch_ = nullptr;    // kernels::kSumSquaresScratch doubles
  double* device_sum_squares_ = nullptr;     // the same, out[0] the running total of sum_squares_add
  double* device_loss_ = nullptr;            // one double: the step's summed token losses
  double read_double(const double* device);  // waits for the stream
};

// The backend on this rank's device (exec/device_placement.h), made current for the process; nullptr
// and "--backend cuda: no CUDA device (<CUDA's message>)" where no device can be used.
std::unique_ptr<Backend> make_cuda_backend(std::string* error, NodeSlot slot = {});

// cudaGetDeviceCount; 0 with CUDA's message in `why_none` where it fails or finds none.
int cuda_device_count(std::string* why_none);

}  // namespace loom::exec
