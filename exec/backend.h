// Backend: where tensors live and how the model's ops run on them. The model and the parallel
// layers call only this interface, so a CUDA backend (cuBLAS + kernels/) slots in beside the CPU one.
// All matrices are row-major; ops take typed views (TensorRef: pointer + dtype) into tensors allocated by
// the same backend. Statistics (norm mean/rstd, row max, sum of exps, losses) and fp32 gradients are float*.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/memory.h"
#include "exec/tensor.h"
#include "kernels/numerics.h"

namespace loom::exec {

struct AttentionShape {
  int batch = 0;     // sequences in the micro-batch
  int seq = 0;       // tokens per sequence
  int heads = 0;     // query heads held by this rank
  int kv_heads = 0;  // key/value heads held by this rank (GQA when fewer than heads)
  int head_dim = 0;
  // Context parallelism with causal load balancing (Megatron-core): each sequence of seq·cp tokens is cut
  // into 2·cp chunks and this rank holds chunks cp_rank and 2·cp−1−cp_rank, so `seq` local tokens.
  int cp = 1, cp_rank = 0;
  int chunk() const { return seq / 2; }  // tokens per chunk under cp > 1
  // Global chunk of local half `half` (0 or 1) of CP rank `rank`'s tokens.
  int chunk_of(int rank, int half) const { return half == 0 ? rank : 2 * cp - 1 - rank; }
  // Position in its sequence of local token t (0 ≤ t < seq): what RoPE and learned positions use.
  int position(int t) const { return kernels::context_parallel_position(t, seq, cp, cp_rank); }
  std::int64_t qkv_cols() const { return static_cast<std::int64_t>(heads + 2 * kv_heads) * head_dim; }
  std::int64_t probs_numel() const { return static_cast<std::int64_t>(batch) * heads * seq * seq; }
};

// Attention dropout of a ring-attention block (Backend::attention_block_forward).
struct AttentionDropout {
  float p = 0;
  std::uint64_t key = 0;
  // Mask index of (local sequence b, local head h, global query i, global key j) is
  // first + ((b·heads_total + h)·S + i)·S + j with S = seq·cp.
  std::uint64_t first = 0;
  int heads_total = 0;
};

// A point in the backend's queue of work (a CUDA event on the compute stream); complete on the CPU,
// where every op finishes before it returns. Communication waits on one before reading a buffer.
class Event {
 public:
  virtual ~Event() = default;
  virtual bool done() const = 0;
  virtual void synchronize() = 0;
};

// A point in the backend's queue with the time the device reaches it: the trace's clock (exec/trace.h).
// On a GPU the host only queues work, so its clock says when an op was queued, not when it ran; a CUDA
// event with timing says when the stream reached it. On the CPU every op has finished when it returns,
// and the host's clock at the call is that time.
class TimedEvent : public Event {
 public:
  // Microseconds from `earlier` (an event of the same backend) to this one; waits until both are reached.
  virtual double microseconds_since(TimedEvent& earlier) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The GPU this backend drives (its index among the visible devices); -1 on the CPU.
  virtual int device() const { return -1; }
  // The device's UUID, the same GPU whichever index CUDA_VISIBLE_DEVICES gives it in each process, so
  // ranks can tell whether they share one; empty off a GPU.
  virtual std::string device_uuid() const { return {}; }
  // The device's dense bf16 peak in FLOP/s where a preset knows it (exec/device_peak.h), else 0.
  virtual double peak_flops() const { return 0; }
  // What a cost file's provenance records of the device (`loom profile`): on a GPU its name, driver and
  // runtime versions, memory, multiprocessors and clocks; nothing on the CPU, which the host describes.
  virtual std::map<std::string, std::string> device_provenance() const { return {}; }

  // The dtype of parameters and activations in the compute path: fp32 on the CPU (the reference), bf16
  // on GPUs (mixed precision: fp32 master weights, moments and main gradients beside it).
  virtual DType compute_dtype() const { return DType::kF32; }

  // Zero-filled tensor of `dtype` charged to `category`.
  Tensor alloc(std::int64_t rows, std::int64_t cols, MemoryCategory category, DType dtype = DType::kF32);
  // The same without filling: for outputs an op overwrites completely (GEMM with beta 0, norms).
  Tensor empty(std::int64_t rows, std::int64_t cols, MemoryCategory category, DType dtype = DType::kF32);
  void release(void* data, std::int64_t bytes, MemoryCategory category);
  // The same storage charged to another category from now on (an activation handed to a send).
  Tensor recharge(Tensor tensor, MemoryCategory category);
  MemoryTracker& memory() { return memory_; }

  // Host fp32 <-> backend copies (checkpoints, data, tests), converting from/to the view's dtype.
  virtual void to_host(float* host, ConstTensorRef src, std::int64_t n) = 0;
  virtual void from_host(TensorRef dst, const float* host, std::int64_t n) = 0;
  // Raw copies of n values in the view's own dtype between backend memory and host memory (messages staged
  // through the host for a host-memory communicator). download returns once `host` holds the values of
  // the work queued so far; after upload returns, `host` may be reused.
  virtual void download(void* host, ConstTensorRef src, std::int64_t n) = 0;
  virtual void upload(TensorRef dst, const void* host, std::int64_t n) = 0;
  // dst ← src converted to dst's dtype (fp32 <-> bf16; the same dtype copies), rounding to nearest even.
  virtual void cast(TensorRef dst, ConstTensorRef src, std::int64_t n) = 0;
  // Finishes queued work (streams on GPUs; a no-op on the CPU).
  virtual void synchronize() {}
  // Writes back and drops `bytes` of `x` from the caches, so the next op reads them from memory (`loom
  // profile` times memory-bound ops with cold operands, as a training step meets them). A no-op where
  // the backend cannot.
  virtual void evict_from_cache(ConstTensorRef /*x*/, std::int64_t /*bytes*/) {}
  // Marks the work queued so far, e.g. a gradient bucket's last op before its all-reduce.
  virtual std::unique_ptr<Event> record_event();
  // The same with its time (the host's clock at the call; the stream's on a GPU).
  virtual std::unique_ptr<TimedEvent> record_timed_event();

  // C = alpha · op(A) · op(B) + beta · C with op(A) m×k, op(B) k×n, leading dimensions in elements.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a, int lda,
                    ConstTensorRef b, int ldb, float beta, TensorRef c, int ldc) = 0;

  // Element-wise.
  virtual void zero(TensorRef x, std::int64_t n) = 0;
  virtual void copy(TensorRef dst, ConstTensorRef src, std::int64_t n) = 0;
  virtual void axpy(TensorRef y, float alpha, ConstTensorRef x, std::int64_t n) = 0;  // y += alpha·x
  virtual void add(TensorRef out, ConstTensorRef a, ConstTensorRef b, std::int64_t n) = 0;
  virtual void add_bias(TensorRef x, ConstTensorRef bias, std::int64_t rows, std::int64_t cols) = 0;
  virtual void bias_grad(float* dbias, ConstTensorRef dy, std::int64_t rows, std::int64_t cols) = 0;  // +=
  virtual double sum_squares(ConstTensorRef x, std::int64_t n) = 0;
  // Σ x² over many views into one double, read once: reset, add each view, then the result. On a GPU the
  // adds are queued and only the result waits for the stream (sum_squares waits at every call); here
  // each add is a sum_squares, added on the host in call order.
  virtual void sum_squares_reset() { sum_squares_total_ = 0; }
  virtual void sum_squares_add(ConstTensorRef x, std::int64_t n) { sum_squares_total_ += sum_squares(x, n); }
  virtual double sum_squares_result() { return sum_squares_total_; }
  // A step's summed token losses, kept where the cross-entropy statistics are: reset, add each micro-
  // batch's Σ_r log(sum_exp_r) + max_r − target_r (in double), read once at the end of the step. Here
  // the statistics are read to the host at each add and summed there in row order.
  virtual void loss_reset() { loss_total_ = 0; }
  virtual void loss_add(const float* max, const float* sum_exp, const float* target, std::int64_t rows);
  virtual double loss_result() { return loss_total_; }

  // Normalisation over rows of `cols` values; the backward accumulates into dw/db and writes dx.
  virtual void layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef x, ConstTensorRef w,
                                 ConstTensorRef b, std::int64_t rows, std::int64_t cols) = 0;
  virtual void layernorm_backward(TensorRef dx, float* dw, float* db, ConstTensorRef dout, ConstTensorRef x,
                                  ConstTensorRef w, const float* mean, const float* rstd, std::int64_t rows,
                                  std::int64_t cols) = 0;
  virtual void rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef x, ConstTensorRef w, std::int64_t rows,
                               std::int64_t cols) = 0;
  virtual void rmsnorm_backward(TensorRef dx, float* dw, ConstTensorRef dout, ConstTensorRef x, ConstTensorRef w,
                                const float* rstd, std::int64_t rows, std::int64_t cols) = 0;

  // Activations: GELU (tanh form, as GPT-2) on n values; SwiGLU on rows of [gate | up] (2·f) → f.
  virtual void gelu_forward(TensorRef out, ConstTensorRef in, std::int64_t n) = 0;
  virtual void gelu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t n) = 0;
  virtual void swiglu_forward(TensorRef out, ConstTensorRef in, std::int64_t rows, std::int64_t f) = 0;
  virtual void swiglu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t rows,
                               std::int64_t f) = 0;

  // Causal attention over a packed [tokens, q|k|v] matrix (tokens ordered sequence-major).
  // probs [batch·heads·seq·seq] holds the softmax output kept for the backward.
  void attention_forward(TensorRef ctx, TensorRef probs, ConstTensorRef qkv, const AttentionShape& s) {
    attention_probs(probs, qkv, s);
    attention_context(ctx, probs, qkv, s);
  }
  // Rows per query block of the attention's products: block [i0, i1) multiplies keys [0, i1) only and
  // skips the products above the causal diagonal; 0: each product is one full seq × seq GEMM. `loom
  // profile` times the attention GEMMs the same way.
  virtual int attention_query_block() const { return 0; }
  // softmax(QKᵀ/√d) with the causal mask (also: selective recomputation).
  virtual void attention_probs(TensorRef probs, ConstTensorRef qkv, const AttentionShape& s) = 0;
  // ctx = P·V, P being the softmax output or its dropout.
  virtual void attention_context(TensorRef ctx, ConstTensorRef probs, ConstTensorRef qkv, const AttentionShape& s) = 0;
  // With attention dropout, `dropped` = probs·mask·keep_scale was multiplied with V; null without.
  virtual void attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef probs, ConstTensorRef dropped,
                                  const std::uint8_t* mask, float keep_scale, ConstTensorRef qkv,
                                  const AttentionShape& s) = 0;
  void attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef probs, ConstTensorRef qkv,
                          const AttentionShape& s) {
    attention_backward(dqkv, dctx, probs, nullptr, nullptr, 1.0f, qkv, s);
  }

  // Ring attention (context parallelism, TransformerEngine's AttnFuncWithCPAndKVP2P, flash style): the
  // local queries of `s` (chunks of s.cp_rank) against one block of keys and values, those of CP rank
  // `kv_rank`, held in `kv` rows [batch·seq, kv_ld] as K (kv_heads·head_dim columns) then V. Each
  // (query chunk, key chunk) tile is fully visible, causal on its diagonal, or skipped, by the chunks'
  // global order. Attention dropout, when `drop.p` > 0, keys the mask on the global position of each
  // probability as the single-rank attention's mask is keyed.
  // Forward: merges the block into the running statistics by the online-softmax rule. acc [batch·seq,
  // heads·head_dim] fp32 (the unnormalised output), row_max and row_sum [batch·heads·seq] fp32; all zero
  // before the first block (a row sum of 0 means no key seen yet).
  virtual void attention_block_forward(float* acc, float* row_max, float* row_sum, ConstTensorRef qkv,
                                       ConstTensorRef kv, int kv_ld, int kv_rank, const AttentionShape& s,
                                       const AttentionDropout& drop);
  // After the last block: ctx = acc / row_sum and lse = row_max + log(row_sum) per (sequence, head, row).
  virtual void attention_block_finish(TensorRef ctx, float* lse, const float* acc, const float* row_max,
                                      const float* row_sum, const AttentionShape& s);
  // Backward of one block from the output `ctx`, its gradient and lse (the scores are recomputed):
  // dq [batch·seq, heads·head_dim] fp32 and the block's dK, dV (dkv, laid out as kv) accumulate.
  virtual void attention_block_backward(float* dq, TensorRef dkv, ConstTensorRef dctx, ConstTensorRef ctx,
                                        const float* lse, ConstTensorRef qkv, ConstTensorRef kv, int kv_ld, int kv_rank,
                                        const AttentionShape& s, const AttentionDropout& drop);
  // dst rows ← src rows (`cols` values each, row strides ld_dst and ld_src), converting the dtype as cast.
  virtual void copy_rows(TensorRef dst, std::int64_t ld_dst, ConstTensorRef src, std::int64_t ld_src, std::int64_t rows,
                         std::int64_t cols);

  // Dropout: mask[i] = 1 with probability 1 − p, drawn from a counter-based hash of (key, first + i),
  // so a value's mask depends on its global position only — the same on every layout.
  virtual void dropout_mask(std::uint8_t* mask, std::int64_t n, std::uint64_t key, std::uint64_t first, float p) = 0;
  // out = in · mask · scale (forward with scale 1/(1−p); the same for the backward).
  virtual void apply_mask(TensorRef out, ConstTensorRef in, const std::uint8_t* mask, std::int64_t n, float scale) = 0;
  // A residual add: out = x + (branch + bias)·mask·scale over rows × cols, bias (null: none) per column,
  // mask (nullptr: none); branch may be overwritten. Here add_bias, apply_mask and add in turn; the CUDA
  // backend runs it as one pass with the same roundings (Megatron-LM's fused bias-dropout-add).
  virtual void bias_dropout_add(TensorRef out, ConstTensorRef x, TensorRef branch, ConstTensorRef bias,
                                const std::uint8_t* mask, std::int64_t rows, std::int64_t cols, float scale);
  // Rotary position embedding on the q and k columns of qkv, in place (inverse = true for the backward).
  virtual void rope(TensorRef qkv, const AttentionShape& s, bool inverse) = 0;

  // Vocabulary-parallel cross-entropy pieces (Megatron): each rank holds logits for columns
  // [vocab_start, vocab_start + cols) of which the first `valid_cols` are real tokens.
  virtual void row_max(float* out, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                       std::int64_t valid_cols) = 0;
  virtual void row_sum_exp(float* out, ConstTensorRef logits, const float* max, std::int64_t rows, std::int64_t cols,
                           std::int64_t valid_cols) = 0;
  // Both at once, where one rank holds whole rows: max[r] and sum_exp[r] relative to it, from one read of the
  // logits from memory (the simulator charges so: CostModel::add_loss): the CPU backend takes each row's max
  // and sum while the row is in cache, the CUDA backend an online softmax. Here row_max then row_sum_exp.
  virtual void row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                               std::int64_t valid_cols);
  virtual void target_logit(float* out, ConstTensorRef logits, const int* targets, std::int64_t rows, std::int64_t cols,
                            std::int64_t vocab_start) = 0;
  // logits ← scale · (softmax − onehot(target)), in place; padded columns get zero.
  virtual void cross_entropy_grad(TensorRef logits, const float* max, const float* sum_exp, const int* targets,
                                  std::int64_t rows, std::int64_t cols, std::int64_t valid_cols,
                                  std::int64_t vocab_start, float scale) = 0;
  // The same gradient written to `out` in its own dtype (the compute dtype the head's GEMMs read);
  // `logits` may be overwritten. Here cross_entropy_grad in place, then a cast: the CUDA backend writes
  // fp32 logits' bf16 gradient in one pass, the value rounded once as the cast would round it.
  virtual void cross_entropy_grad_into(TensorRef out, TensorRef logits, const float* max, const float* sum_exp,
                                       const int* targets, std::int64_t rows, std::int64_t cols,
                                       std::int64_t valid_cols, std::int64_t vocab_start, float scale);

  // Token embedding rows [vocab_start, vocab_start + rows_held) of `table`; others left unchanged.
  virtual void embedding_forward(TensorRef out, ConstTensorRef table, const int* tokens, std::int64_t n,
                                 std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) = 0;
  virtual void embedding_backward(float* dtable, ConstTensorRef dout, const int* tokens, std::int64_t n,
                                  std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) = 0;

  // Mixture of experts: token rows moved to their experts' order and back (index arrays are host ints;
  // `scales` and `out` of row_dots are fp32 backend memory).
  // out[i] = in[index[i]] for `rows` rows of `cols` values: a gather or a permutation, any dtype.
  virtual void index_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, std::int64_t cols) = 0;
  // out[i] = Σ_j in[index[i·k + j]] for j < k, added in j order: each token's k expert outputs summed back.
  virtual void sum_indexed_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, int k,
                                std::int64_t cols) = 0;
  // out[i] = scales[i] · in[i] (a routed row's activation weighted by its router probability); in may be out.
  virtual void scale_rows(TensorRef out, ConstTensorRef in, const float* scales, std::int64_t rows,
                          std::int64_t cols) = 0;
  // out[i] = Σ_c a[i, c] · b[i, c], accumulated in fp32 (the router probability's gradient).
  virtual void row_dots(float* out, ConstTensorRef a, ConstTensorRef b, std::int64_t rows, std::int64_t cols) = 0;

  // AdamW (Loshchilov & Hutter) on n fp32 values `param` (the master weights under mixed precision);
  // `step` counts from 1. A non-null `param_copy` receives the updated values in its dtype (the
  // compute-dtype parameters the next forward reads), in the same pass.
  virtual void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, int step, TensorRef param_copy) = 0;
  void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, int step) {
    adamw(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, nullptr);
  }
  virtual void scale(TensorRef x, float alpha, std::int64_t n) = 0;

 protected:
  virtual void* allocate_raw(std::int64_t bytes) = 0;
  virtual void free_raw(void* data) = 0;

 private:
  MemoryTracker memory_;
  double sum_squares_total_ = 0;
  double loss_total_ = 0;
};

// Where on its node a rank runs: a GPU backend drives device local_rank modulo the visible devices
// (exec/device_placement.h).
struct NodeSlot {
  int local_rank = 0;
  int local_size = 1;
};

// "cpu" (always) or "cuda" (when built with CUDA); nullptr with a message for anything else.
std::unique_ptr<Backend> make_backend(const std::string& name, std::string* error, NodeSlot slot = {});

// The GPUs this process can see (after CUDA_VISIBLE_DEVICES); 0 with the reason in `why_none` where
// there are none or the build has no CUDA backend. It starts no context on any of them.
int visible_gpus(std::string* why_none = nullptr);

// The backend names this build can make, "cpu" first (the fp32 reference every other backend's
// ops are tested against). A listed GPU backend may still fail to start on a host without a GPU.
std::vector<std::string> available_backends();

}  // namespace loom::exec
