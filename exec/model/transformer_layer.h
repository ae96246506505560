// One pre-norm transformer block, forward and backward written out, tensor-parallel in Megatron's
// way (heads and MLP columns split; see parallel/tensor_parallel.h). It keeps exactly the
// activations Korthikanti et al. 2022 count: both norm inputs, the QKV and MLP inputs, Q/K/V, the
// softmax output, the projection input, and the activation function's input and output. Recomputation:
// none, selective (the attention core), full (the block from its input) or op, torchtitan's op-level
// SAC (core/op_recompute.h): the outputs of the linear layers its policy saves, attention's output and
// log-sum-exp and the TP reduce-scatters' outputs are kept; the backward re-runs the rest.
#pragma once

#include <array>

#include "core/model_spec.h"
#include "core/names.h"
#include "core/op_recompute.h"
#include "core/parallel_config.h"
#include "exec/backend.h"
#include "exec/model/gpt_layout.h"
#include "exec/model/mlp.h"
#include "exec/model/moe_mlp.h"
#include "exec/parallel/context_parallel.h"
#include "exec/parallel/tensor_parallel.h"
#include "exec/trace.h"

namespace loom::exec {

// One layer's parameters (typed views in the compute dtype) or fp32 main gradients inside its unit;
// absent biases are null.
template <class P>
struct LayerSlots {
  P ln1_w{}, ln1_b{}, qkv_w{}, qkv_b{}, proj_w{}, proj_b{}, ln2_w{}, ln2_b{}, fc_w{}, fc_b{}, fc2_w{}, fc2_b{};
  P q_norm_w{}, k_norm_w{};  // QK-norm's gains (ModelSpec::qk_norm)
};
using LayerWeights = LayerSlots<ConstTensorRef>;
using LayerGrads = LayerSlots<float*>;
LayerWeights layer_weights(const Unit& unit, ConstTensorRef base);
LayerGrads layer_grads(const Unit& unit, float* base);

// Dropout (Megatron's hidden and attention dropout) with masks keyed on each value's global position.
struct DropoutSettings {
  float p = 0;  // 0: no dropout
  std::uint64_t seed = 0;
  float keep_scale() const { return 1.0f / (1.0f - p); }
  std::uint64_t key(int layer, int site) const {
    return seed * 0x2545F4914F6CDD1DULL + static_cast<std::uint64_t>(layer + 1) * 16 + site;
  }
};

// A byte mask stored in a float tensor (charged as 1 byte per value, rounded up to 4).
Tensor alloc_mask(Backend& backend, std::int64_t n);
inline std::uint8_t* mask_data(Tensor& t) { return reinterpret_cast<std::uint8_t*>(t.data()); }

struct LayerCache {
  Tensor x;                // block input = ln1 input [local tokens, h]
  Tensor ln1, stats1;      // QKV input (local rows under SP) and its mean/rstd
  Tensor qkv;              // Q, K, V after RoPE [tokens, qkv_cols]
  Tensor q_in, k_in;       // QK-norm: Q and K before their norm [tokens, heads·head_dim or kv_heads·head_dim]
  Tensor q_rstd, k_rstd;   // and its 1/rms per head and token (per token over the full width)
  Tensor probs;            // softmax output [batch·heads·seq·seq] (dropped by selective recomputation)
  Tensor lse;              // ring attention (cp > 1): log-sum-exp per (sequence, head, row), not probs
  Tensor ctx;              // projection input [tokens, heads·head_dim]
  Tensor x2, ln2, stats2;  // ln2 input (residual), MLP input, stats
  Tensor fc;               // dense MLP: activation-function input [tokens, ffn_in]
  Tensor act;              // dense MLP: activation-function output [tokens, ffn]
  MoeCache moe;            // MoE layer: routing, dispatched rows, the experts' activations
  // Op-level SAC: the kept column blocks of QKV (before RoPE, as wq/wk/wv return them) and of the MLP's
  // up projection (before the activation), each [tokens, kept columns]; the kept row-parallel outputs
  // (partial sums of all tokens) and, under SP, both reduce-scatters' outputs. Empty where not kept.
  struct OpKept {
    Tensor qkv, mlp_up, attn_out, mlp_down, attn_rs, mlp_rs;
  } op;
  Tensor attn_mask, dropped;                      // attention dropout: mask and dropped softmax output (fed to V)
  Tensor proj_mask, mlp_mask;                     // hidden dropout after the attention and MLP blocks
  std::int64_t first_sequence = 0;                // global index of the micro-batch's first sequence (masks)
  bool complete() const { return !qkv.empty(); }  // else recomputed in the backward (full or op)
};

class TransformerLayer {
 public:
  // `tracer` (optional): each op becomes a slice named like the simulator's kernels. `ep`: the
  // expert-parallel group of an MoE model (null: a group of one). `seq`: tokens of a whole sequence, of
  // which a rank of the context-parallel group `cp` (null: a group of one) holds seq/cp; `cp_comm`: how
  // its attention reaches the other ranks' keys and values. `attention`: kFlash keeps the output and
  // its log-sum-exp and recomputes the scores in the backward (the backend's block ops, as context
  // parallelism always runs); kUnfused keeps the probabilities.
  TransformerLayer(const ModelSpec& model, const LocalDims& dims, int batch, int seq, Backend& backend,
                   TensorParallel& tp, DropoutSettings dropout = {}, Tracer* tracer = nullptr,
                   Communicator* ep = nullptr, Communicator* cp = nullptr, CpComm cp_comm = CpComm::kP2P,
                   AttentionKernel attention = AttentionKernel::kUnfused)
      : model_(model),
        dims_(dims),
        batch_(batch),
        cp_(cp, backend, seq, cp_comm, tracer),
        seq_(cp_.local_seq()),
        backend_(backend),
        tp_(tp),
        dropout_(dropout),
        attention_(attention),
        tracer_(tracer),
        mlp_(backend, model.activation, dims.hidden, dims.ffn),
        moe_(model, dims, backend, tp, ep, tracer) {}

  // Takes the block input, returns its output [local tokens, h] (activations). With `recompute`
  // kFull only the input is kept; kSelective drops the softmax output; kOp keeps the input and
  // LayerCache::op, the attention output and its log-sum-exp (flash attention only). `moe`: an MoE layer's router,
  // shared and routed experts (null for a dense layer, whose MLP is in w).
  Tensor forward(const LayerWeights& w, Tensor x, LayerCache& cache, Recompute recompute, int layer,
                 std::int64_t first_sequence, const MoeWeights* moe = nullptr);
  // dy: gradient of the output; returns the gradient of the input. Accumulates into g (and moe_grads);
  // the linear layers' weight gradients go through `wg`, which zero-bubble defers to the W pass (with
  // the tensors they read).
  Tensor backward(const LayerWeights& w, const LayerGrads& g, LayerCache& cache, Tensor dy, Recompute recompute,
                  int layer, WeightGradStore& wg, const MoeWeights* moe = nullptr, const MoeGrads* moe_grads = nullptr);
  double moe_imbalance() const { return moe_.max_imbalance(); }
  double moe_imbalance_min() const { return moe_.min_imbalance(); }

 private:
  std::int64_t tokens() const { return static_cast<std::int64_t>(batch_) * seq_; }
  // A fused GEMM's output columns per linear layer: [first, first + cols), re-run by op-level SAC or kept.
  struct ColumnBlock {
    int first, cols;
    bool rerun;
  };
  std::vector<ColumnBlock> qkv_blocks() const;
  std::vector<ColumnBlock> mlp_up_blocks() const;
  // The kept blocks of src [rows, ld], side by side (empty when every block re-runs).
  Tensor keep_columns(const Tensor& src, int ld, const std::vector<ColumnBlock>& blocks);
  // dst [rows, ld] ← the kept blocks from `kept`, the re-run ones as x [rows, k] · w's rowsᵀ (w [ld, k]), one
  // GEMM per run of adjacent re-run blocks (with `kept` null every block runs: one GEMM).
  void rebuild_columns(Tensor& dst, int ld, const std::vector<ColumnBlock>& blocks, const Tensor* kept,
                       ConstTensorRef x, int k, ConstTensorRef w);
  // The block's input to attention: norm, SP's all-gather, QKV (every column, or the re-run blocks beside
  // those kept in `kept`), its bias and RoPE, in the op slices `norm` and `qkv` (the rebuild's OpPrefix
  // names them "recompute ..."). `keep`: op-level SAC keeps its blocks, before RoPE, in c.op.qkv.
  void attention_input(const LayerWeights& w, LayerCache& c, OpSlices& op, const Tensor* kept, bool keep);
  // QK-norm on Q's and K's columns of c.qkv in place (before RoPE), keeping their inputs and 1/rms; and its
  // backward on dqkv's, the gains' gradients into g.
  void qk_norm_forward(const LayerWeights& w, LayerCache& c);
  // Q's and K's columns [first, first + cols) of the QKV output, normalised in rows of `width` values (a
  // head, or the whole block over the full width), with the cache's input and 1/rms tensors for each.
  struct QkPart {
    int first, cols, width;
    Tensor *in, *rstd;
    std::int64_t rows(std::int64_t tokens) const { return tokens * cols / width; }
  };
  std::array<QkPart, 2> qk_parts(LayerCache& c) const;
  void qk_norm_backward(const LayerWeights& w, const LayerGrads& g, LayerCache& c, Tensor& dqkv);
  // x + dropout(branch + bias), the branch's rows local (its dropout mask, site `site`, kept in `mask`).
  Tensor add_residual(const Tensor& x, Tensor branch, ConstTensorRef bias, Tensor& mask, int layer, int site,
                      std::int64_t first_sequence);
  bool sequence_parallel() const { return tp_.size() > 1 && tp_.sequence_parallel(); }
  // A copy of t in the activations (what op-level SAC keeps).
  Tensor kept_copy(const Tensor& t);
  // Op-level SAC's recompute: the block's cache rebuilt from its input and LayerCache::op, up to the MLP's
  // down projection (torch.utils.checkpoint's early stop: w2's input is the last tensor the backward saved).
  void rebuild(const LayerWeights& w, LayerCache& c, int layer);
  AttentionShape attention_shape() const;
  void norm_forward(Tensor& out, Tensor& stats, const Tensor& x, ConstTensorRef w, ConstTensorRef b);
  Tensor combine_local(Tensor partial, Tensor whole);
  // Mask of `rows` local token rows × `cols` (hidden dropout) for the cache's micro-batch.
  Tensor row_mask(std::int64_t rows, std::int64_t cols, int layer, int site, std::int64_t first_sequence);
  void attention_mask(LayerCache& c, int layer);
  bool ring() const { return cp_.size() > 1; }
  // Flash style: the block ops (over the ring under context parallelism, in place on one rank).
  bool fused() const { return ring() || attention_ == AttentionKernel::kFlash; }
  AttentionDropout ring_dropout(const LayerCache& c, int layer) const;
  void norm_backward(TensorRef dx, float* dw, float* db, ConstTensorRef dout, const Tensor& x, ConstTensorRef w,
                     const Tensor& stats);
  // A tensor of activations (or their gradients) in the backend's compute dtype.
  Tensor act(std::int64_t rows, std::int64_t cols, MemoryCategory category) {
    return backend_.empty(rows, cols, category, backend_.compute_dtype());
  }

  const ModelSpec& model_;
  LocalDims dims_;
  int batch_;
  ContextParallel cp_;
  int seq_;  // local tokens per sequence
  Backend& backend_;
  TensorParallel& tp_;
  DropoutSettings dropout_;
  AttentionKernel attention_;
  Tracer* tracer_;
  Mlp mlp_;
  MoeMlp moe_;
  OpRerun rerun_ = op_rerun(model_);
};

}  // namespace loom::exec
