#include "planner/memory_model.h"

#include <algorithm>
#include <cmath>

#include "core/op_recompute.h"
#include "core/partition.h"
#include "core/pipeline_split.h"
#include "core/units.h"

namespace loom {

namespace {

// The most layers one model chunk of `stage` holds (core/pipeline_split.h).
int largest_chunk(const ModelSpec& m, const ParallelConfig& c, int stage) {
  int most = 0;
  for (int chunk = 0; chunk < c.vpp; ++chunk) most = std::max(most, chunk_layers(m.layers, c, stage, chunk));
  return most;
}

// Bytes per element of a linear layer's input kept for its weight gradient: FP8 keeps the FP8 copy
// it made for the forward GEMM (on Hopper the transposed one, which is what the weight gradient
// reads), not the bf16 tensor (TransformerEngine docs, performance_considerations.rst).
double linear_input_bytes(const TrainingSpec& t) { return t.precision == Precision::kFp8 ? 1.0 : t.activation_bytes; }

// `f`, below: the share of MoE layers among the layers averaged over (a stage's, or the model's).

// Routed copies of each token an MoE layer's experts on this rank process, averaged over the layers:
// k on a balanced rank; under expert parallelism the busiest rank's --moe-imbalance times that.
double routed_copies(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, double f) {
  return (m.moe.active() ? f * m.moe.experts_per_token : 0.0) * (c.ep > 1 ? t.moe_imbalance : 1.0);
}

// The MLP's inner width per token (the mean over the layers): a dense layer's ffn, an MoE layer's
// routed copies' expert ffn and the shared expert's.
double mlp_width(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, double f) {
  if (!m.moe.active()) return m.ffn_hidden;
  return (1.0 - f) * m.ffn_hidden + routed_copies(m, t, c, f) * m.moe.expert_ffn + f * m.moe.shared_ffn;
}

// Activation bytes of the parts of a layer outside the tensor-parallel regions (norm inputs and
// outputs, dropout masks): replicated across TP ranks unless sequence parallelism splits them.
// `lb`: bytes per element of a linear layer's saved input.
double replicated_activation_bytes(const ModelSpec& m, double sbh, double ab, double lb) {
  const double norm_inputs = 2.0 * ab * sbh;
  const double norm_outputs = 2.0 * lb * sbh;                // inputs of the QKV and MLP-up projections
  const double dropout_masks = m.dropout ? 2.0 * sbh : 0.0;  // 1 byte per element
  return norm_inputs + norm_outputs + dropout_masks;
}

// What a norm keeps per token for its backward, beside its input: the fp32 statistics of its row,
// mean and 1/σ for LayerNorm, 1/rms for RMSNorm (TransformerEngine's LayerNorm and RMSNorm save mu and
// rsigma, Apex's FusedLayerNorm mean and invvar, all fp32; the executor's norms likewise).
double norm_statistics_bytes(const ModelSpec& m) { return m.norm == Norm::kLayerNorm ? 8.0 : 4.0; }

// MoE: each token's hidden state copied to the k experts it is routed to, kept as their GEMMs' input,
// and each copy's router probability (fp32), kept to weight the expert's activation in the backward.
// With expert TP = TP whole on every TP rank even under sequence parallelism: Megatron-core's dispatcher
// all-gathers the routed tokens over the expert-TP group before the experts (token_dispatcher.py), as
// the executor routes every token on every TP rank. With etp 1 each TP rank routes its own s/tp tokens.
// A gated shared expert (Qwen2-MoE) keeps its gate, one fp32 value per token on every TP rank.
double dispatched_activation_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, double sb,
                                   double lb, double f) {
  const double rows = static_cast<double>(c.expert_tp()) / c.tp;
  const double gate = m.moe.shared_gate && m.moe.shared_ffn > 0 ? 4.0 * f : 0.0;
  return routed_copies(m, t, c, f) * rows * sb * (lb * m.hidden + 4.0) + gate * sb;
}

// Activation bytes inside the TP regions, before dividing by t: Q, K, V, projection input, MLP.
double tensor_parallel_activation_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, double sb,
                                        double ab, double lb, double moe_fraction) {
  const double q = static_cast<double>(m.q_dim());
  const double kv = static_cast<double>(m.kv_dim());
  const double f = mlp_width(m, t, c, moe_fraction);  // MoE: the experts a token visits (and the shared one)
  const double attention = ab * sb * (q + 2.0 * kv) + lb * sb * q;  // Q, K, V; attention output (projection input)
  // QK-norm keeps its inputs (Q and K as projected) beside its outputs, and per-head norms their rows' 1/rms
  // (fp32, per head and token); a full-width norm's per-token statistics are replicated (qk_norm_statistics).
  const double qk_norm =
      m.qk_norm == QkNorm::kNone
          ? 0.0
          : ab * sb * (q + kv) + (m.qk_norm == QkNorm::kPerHead ? 4.0 * sb * (m.heads + m.kv_heads) : 0.0);
  // The activation function's input (gate and up for SwiGLU) and its output, the down projection's input.
  const double mlp = (m.activation == Activation::kSwiGLU ? 2.0 : 1.0) * ab * sb * f + lb * sb * f;
  return attention + qk_norm + mlp;
}

// The s×s attention core: softmax output, dropout mask and dropout output (5as²b at 2 bytes).
double attention_core_bytes(const ModelSpec& m, const TrainingSpec& t, double s, double b, double ab) {
  const double a = m.heads;
  if (t.attention == AttentionKernel::kFlash) return 4.0 * a * s * b;  // fp32 log-sum-exp per row
  const double scores = a * s * s * b;
  return m.dropout ? (2.0 * ab + 1.0) * scores : ab * scores;
}

// ZeRO's units of one layer per rank (the executor's, exec/model/gpt_layout.h): a dense layer is one
// unit; an MoE layer two, its attention, norms, router and shared expert, then its routed experts (their
// own unit, as they shard over the expert-data-parallel group). The largest layer, and the largest unit
// a layer's pass acquires first (what the previous unit's pass prefetches).
struct LayerUnits {
  double largest_layer = 0, largest_first_unit = 0;
};
LayerUnits layer_units(const ModelSpec& m, const ParallelConfig& c) {
  const int tp = c.tp;
  if (!m.moe.active()) {
    const double layer = layer_params_per_rank(m, tp, c.ep, c.etp);
    return {layer, layer};
  }
  ModelSpec all_moe = m;
  all_moe.moe.first_dense_layers = 0;
  all_moe.moe.layer_freq = 1;
  const double rest = layer_params_per_tp_rank(all_moe, tp) - routed_expert_params_per_tp_rank(all_moe, tp);
  LayerUnits u{rest + routed_expert_params_per_rank(all_moe, c), rest};
  if (m.moe_layers() < m.layers) {
    ModelSpec dense = m;
    dense.moe = MoeSpec{};
    const double layer = layer_params_per_tp_rank(dense, tp);
    u.largest_layer = std::max(u.largest_layer, layer);
    u.largest_first_unit = std::max(u.largest_first_unit, layer);
  }
  return u;
}

// ZeRO-2 and 3 reduce-scatter each unit's gradient (a layer, the word embedding, the final norm
// with an untied LM head) from an unsharded copy that lives from the unit's backward to its
// reduction. ZeRO-3 also all-gathers each unit's parameters for its forward and backward, with the
// next unit's gather in flight while one computes (DeepSpeed's prefetch; the executor does the
// same): two gathered units at a time. The stage's peak is the largest of its phases.
double zero_buffer_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, int stage) {
  if (c.zero < 2) return 0.0;  // ZeRO-0/1 reduce the contiguous gradient buffer in place
  const double pb = t.param_bytes, gb = t.grad_bytes;
  const LayerUnits units = layer_units(m, c);
  const double layer = units.largest_layer, first_unit = units.largest_first_unit;
  const double embedding = static_cast<double>(padded_vocab(m.vocab, c.tp)) * m.hidden / c.tp;
  const double positions = m.position == PositionEmbedding::kLearned ? static_cast<double>(m.seq_len) * m.hidden : 0.0;
  const double norm = static_cast<double>(m.norm_params());
  const bool gather = c.zero >= 3;
  // With pp == 1 a tied word embedding is the head too: its gradient, begun by the head's backward,
  // stays whole until the embedding's backward completes it, beside every layer's.
  const double shared = m.tied_embeddings && c.pp == 1 ? embedding * gb : 0.0;
  // A layer's backward: its gradient, its parameters and the next layer's first unit prefetched (none
  // after the first layer of a model chunk).
  const bool prefetch = largest_chunk(m, c, stage) >= 2;
  double peak = layer * gb + shared + (gather ? (layer + (prefetch ? first_unit : 0.0)) * pb : 0.0);
  if (stage == c.pp - 1) {
    // The head's backward: final norm and LM head (one unit when untied, the tied embedding's copy
    // when pp > 1, the shared embedding when pp == 1), with the stage's last layer prefetched.
    const double head_grads =
        m.tied_embeddings ? norm * gb + (c.pp > 1 ? embedding * gb : shared) : (norm + embedding) * gb;
    peak = std::max(peak, head_grads + (gather ? (norm + embedding + first_unit) * pb : 0.0));
  }
  if (stage == 0) {
    // The embedding's forward (positions or the first layer prefetched, then the positions with
    // the first layer) and its gradient.
    if (gather)
      peak =
          std::max({peak, (embedding + (positions > 0 ? positions : first_unit)) * pb, (positions + first_unit) * pb});
    peak = std::max(peak, std::max(embedding, positions) * gb);
  }
  return peak;
}

// Pipeline send and receive buffers: at most one send per direction in flight (the executor, like
// Megatron-LM, waits for the previous send before the next), activations forward from every stage
// but the last, gradients back from every stage but the first, and the gradient received during a
// backward on every stage but the last. A received activation is the stage's input, counted with
// the activations. Interleaving makes every stage a middle one for some model chunk. Whether all of
// these are alive at once depends on when the peer receives: this is the most there can be.
double p2p_buffer_bytes(const ParallelConfig& c, int stage, double message_bytes) {
  if (c.pp == 1) return 0.0;
  const bool first = stage == 0 && c.vpp == 1, last = stage == c.pp - 1 && c.vpp == 1;
  return ((last ? 0.0 : 2.0) + (first ? 0.0 : 1.0)) * message_bytes;
}

// Context parallelism's key/value exchange buffers for the one layer whose attention runs. Ring
// (TransformerEngine's AttnFuncWithCPAndKVP2P): two receive buffers in flight, the current step's
// and the next's, each of the local K and V — in the backward K, V and their gradients packed
// together, twice that, which is the peak. All-to-all: the head-sharded copies of Q, K and V (and
// of the output after) beside the sequence-sharded ones, the same size. All-gather: K and V of all
// s tokens, and in the backward their gradients of the same size.
// PyTorch's ring attention (TrainingSpec::cp_attention pytorch) holds in its backward the gathered K and
// V (all_gather) or the current and next step's (p2p), the fp32 gradients of the rank's queries, keys
// and values, and the fp32 key/value gradients in flight, the one sent and the one received.
double cp_buffer_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, double local_tokens) {
  if (c.cp == 1) return 0.0;
  const double ab = t.activation_bytes;
  const double q = static_cast<double>(m.q_dim()) / c.tp, kv = static_cast<double>(m.kv_dim()) / c.tp;
  const double local_kv = 2.0 * ab * local_tokens * kv;
  if (t.cp_attention == CpAttention::kPyTorch) {
    const double kv_buffers = c.cp_comm == CpComm::kAllGather ? c.cp * local_kv : 2.0 * local_kv;
    return kv_buffers + 4.0 * local_tokens * q + 3.0 * 4.0 * 2.0 * local_tokens * kv;
  }
  switch (c.cp_comm) {
    case CpComm::kP2P: return 2.0 * 2.0 * local_kv;
    case CpComm::kA2A: return ab * local_tokens * (q + 2.0 * kv);
    case CpComm::kAllGather: return 2.0 * c.cp * local_kv;
  }
  return 0.0;
}

// FP8: TransformerEngine keeps the bf16 weights and adds an FP8 copy of each linear weight (and
// its transpose on Hopper), made on the step's first micro-batch and kept to its end: FP8 training
// can need more memory than bf16 (TE issues #257, #1261, #1429). Under ZeRO-3 a rank casts its
// shard (FSDP2's float8 all-gather). The layers' parameters stand for their linear weights (norms
// and biases are a negligible share). `layer_params`: the stage's layer parameters (StageParams::layers).
double fp8_weight_copy_bytes(const TrainingSpec& t, const ParallelConfig& c, const ClusterSpec& cluster,
                             double layer_params) {
  if (t.precision != Precision::kFp8) return 0.0;
  double weights = layer_params;
  if (c.zero >= 3) weights /= c.zero_shards();
  // Rowwise scaling keeps two copies anywhere: one scaled per row, one per column (CostModel::fp8_cast_s).
  return weights * (cluster.device.fp8_gemm_tn_only || t.fp8_recipe == Fp8Recipe::kRowwise ? 2.0 : 1.0);
}

// Delayed scaling's amax history: per FP8 linear module (four per layer) fp32 tensors of shape
// (history, 3) for the forward's input, weight and output and (history, 2) for the backward's
// gradients, at TransformerEngine's default history of 1024 steps (DelayedScaling recipe; NeMo's
// FP8 configs keep it).
double fp8_amax_history_bytes(const TrainingSpec& t, int layers) {
  if (t.precision != Precision::kFp8 || t.fp8_recipe != Fp8Recipe::kDelayed) return 0.0;
  constexpr double kHistory = 1024, kModulesPerLayer = 4, kTensorsPerModule = 3 + 2;
  return layers * kModulesPerLayer * kHistory * kTensorsPerModule * 4.0;
}

}  // namespace

// An MoE layer's widths on one rank, per token of the micro-batch in activation values: K routed copies
// (the busiest EP rank's; with etp 1 a rank's copies come from its own s/tp tokens), one expert's inner
// and up-projection widths, and the shared expert's, split over TP.
struct MoeRankWidths {
  double K = 0, ef = 0, ef_in = 0, sf = 0, sf_in = 0;
};
MoeRankWidths moe_rank_widths(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c) {
  const bool swiglu = m.activation == Activation::kSwiGLU;
  MoeRankWidths w;
  w.K = m.moe.experts_per_token * (c.ep > 1 ? t.moe_imbalance : 1.0) * c.expert_tp() / c.tp;
  w.ef = m.moe.expert_ffn / c.expert_tp();
  w.ef_in = swiglu ? 2.0 * w.ef : w.ef;
  w.sf = m.moe.shared_ffn / c.tp;
  w.sf_in = swiglu ? 2.0 * w.sf : w.sf;
  return w;
}

// Zero-bubble: what an MoE layer's backward keeps for the W pass in workspace until its B pass ends. The
// shared expert's up-projection gradient (and a gated one's scaled activation) from its backward on; the
// copies' output gradients and scaled activations from the experts' first pass; their up projections'
// gradients from the second. None under other schedules.
struct MoeKeptWork {
  double shared = 0, first = 0, second = 0;
};
MoeKeptWork moe_kept_work(const ModelSpec& m, const ParallelConfig& c, const MoeRankWidths& w) {
  if (c.schedule != Schedule::kZeroBubble) return {};
  const bool gated = m.moe.shared_gate && m.moe.shared_ffn > 0;
  MoeKeptWork k;
  k.shared = m.moe.shared_ffn > 0 ? w.sf_in + (gated ? w.sf : 0.0) : 0.0;
  k.first = w.K * (m.hidden + w.ef);
  k.second = w.K * w.ef_in;
  return k;
}

// An MoE layer's transient values per token (in units of one activation value), the executor's
// (exec/model/moe_mlp.cc) beside `around` (the layer's output and residual gradients) in its backward:
// the experts' two passes over buffers for all K routed copies (a grouped GEMM's), first the copies'
// output gradients (h) with the activation function's input gradient (ffn_in), its output gradient and
// the scaled activation (ffn each), then the input gradients (h) beside the first; each copy's fp32
// probability gradient; the shared expert's input gradient (h), or earlier its own backward beside the
// dispatched output gradients. Under expert parallelism a reorder or exchange holds the K rows twice.
// The forward: the experts' outputs (h) and scaled activations (ffn) of the K copies, or the combined
// output beside the shared expert's.
// With etp 1 a rank's copies come from its own s/tp tokens: K counts them per token of the micro-batch.
double moe_workspace(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, double around) {
  const double h = m.hidden, ab = t.activation_bytes;
  const MoeRankWidths w = moe_rank_widths(m, t, c);
  const double K = w.K, ef = w.ef, ef_in = w.ef_in, sf = w.sf, sf_in = w.sf_in;
  const double probs = K * 4.0 / ab;
  const double shared_dx = m.moe.shared_ffn > 0 ? h : 0.0;
  const double first_pass = K * (h + ef_in + 2.0 * ef), second_pass = K * (ef_in + h);
  const double moved = c.ep > 1 ? 2.0 * K * h : 0.0;
  // A gated shared expert (Qwen2-MoE) is a row-scaled MLP: its scaled activation beside the activation
  // gradient, and one fp32 gate gradient per token.
  const bool gated = m.moe.shared_gate && m.moe.shared_ffn > 0;
  const double shared =
      m.moe.shared_ffn > 0 ? K * h + sf_in + std::max((gated ? 2.0 : 1.0) * sf + (gated ? 4.0 / ab : 0.0), h) : 0.0;
  const MoeKeptWork kept = moe_kept_work(m, c, w);
  const double kept_shared = kept.shared, kept_first = kept.first + kept.shared, kept_second = kept.second;
  const double backward =
      around + std::max({first_pass + probs + shared_dx + kept_shared, second_pass + kept_first + probs + shared_dx,
                         moved + kept_first + kept_second + probs + shared_dx, shared});
  const double forward = std::max({K * (h + ef), K * h + 2.0 * shared_dx + (gated ? sf : 0.0), moved});
  return std::max(backward, forward);
}

// What an MoE layer's backward keeps for zero-bubble's W pass in workspace until the layer's B pass ends
// (moe_workspace's kept_first and kept_second, and the router's fp32 logit gradients), per token.
double moe_zero_bubble_kept_work(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c) {
  if (c.schedule != Schedule::kZeroBubble || !m.moe.active()) return 0.0;
  const MoeKeptWork k = moe_kept_work(m, c, moe_rank_widths(m, t, c));
  return k.shared + k.first + k.second + 4.0 * m.moe.experts / t.activation_bytes;
}

// The kinds of layer a stage holds, and whether a layer of that kind gets its output's gradient as a
// temporary (the layer above's input gradient, or the head's) rather than in the pipeline's receive
// buffer: every layer but a model chunk's last, and every layer of the last stage.
struct StageKinds {
  bool dense = false, moe = false, dense_dy = false, moe_dy = false;
};
StageKinds stage_kinds(const ModelSpec& m, const ParallelConfig& c, int stage) {
  StageKinds k;
  if (!m.moe.active()) {  // one kind: no need to walk the layers
    k.dense = stage_layer_count(m.layers, c, stage) > 0;
    k.dense_dy = k.dense && (largest_chunk(m, c, stage) >= 2 || stage == c.pp - 1);
    return k;
  }
  for (int chunk = 0; chunk < c.vpp; ++chunk) {
    const int v = chunk * c.pp + stage, first = first_layer_of(m.layers, c, v);
    const int end = first + virtual_stage_layer_count(m.layers, c, v);
    for (int l = first; l < end; ++l) {
      const bool dy = l + 1 < end || stage == c.pp - 1;
      if (m.is_moe_layer(l)) {
        k.moe = true;
        k.moe_dy = k.moe_dy || dy;
      } else {
        k.dense = true;
        k.dense_dy = k.dense_dy || dy;
      }
    }
  }
  return k;
}

double zero_bubble_pending_w(const ParallelConfig& c, int stage, long long micro_batches) {
  if (c.schedule != Schedule::kZeroBubble) return 0.0;
  // Stage s warms up with p − s − 1 forwards, then F, B and (once s are pending) the oldest W; the
  // peak follows the last steady forward, with min(i, s) W passes pending at its i-th.
  return std::max(0.0, std::min<double>(stage, static_cast<double>(micro_batches) - (c.pp - stage)));
}

double zero_bubble_kept_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, int stage) {
  const ZeroBubbleKept k = zero_bubble_kept(m, t, c, stage);
  return k.layers + k.head;
}

ZeroBubbleKept zero_bubble_kept(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, int stage) {
  if (c.schedule != Schedule::kZeroBubble) return {};
  // Per token of the micro-batch: each linear layer's input and output gradient, all tokens (under
  // SP the all-gathered copies the B pass made; exec/model/transformer_layer.cc keeps exactly these).
  const double tokens = (t.seq_len > 0 ? t.seq_len : m.seq_len) * static_cast<double>(c.micro_batch) / c.cp;
  const double ab = t.activation_bytes, h = m.hidden, tp = c.tp;
  const double local_h = c.sequence_parallel ? h / tp : h;
  const double q = static_cast<double>(m.q_dim()) / tp;
  const double qkv = q + 2.0 * static_cast<double>(m.kv_dim()) / tp;
  const bool gated = m.activation == Activation::kSwiGLU;
  // Attention: QKV's input and gradient, the projection's input (the context) and output gradient.
  const double attention = h + qkv + q + h;
  // A dense MLP: the up projection's input and gradient, the down projection's input (the activation)
  // and output gradient.
  const double f = m.ffn_hidden / tp, f_in = gated ? 2.0 * f : f;
  const double dense = h + f_in + f + h;
  // An MoE layer: the router's input (the rank's rows) and fp32 logit gradients, the output gradient as
  // the rank holds it; per routed copy the expert's input, output gradient, scaled activation and up
  // projection's gradient; the shared expert like a dense MLP (its input all-gathered under SP).
  double moe = 0;
  if (m.moe.active()) {
    const MoeRankWidths e = moe_rank_widths(m, t, c);
    const double shared = m.moe.shared_ffn > 0 ? (c.sequence_parallel ? 2.0 * h : 0.0) + e.sf_in + e.sf : 0.0;
    moe = 2.0 * local_h + 4.0 * m.moe.experts / ab + e.K * (2.0 * h + e.ef + e.ef_in) + shared;
  }
  const LayerMix mix = stage_layer_mix(m, c, stage);
  ZeroBubbleKept k;
  k.layers = ab * tokens * (mix.total() * attention + mix.dense * dense + mix.moe * moe);
  // The LM head's input and its logits' gradient.
  if (stage == c.pp - 1) k.head = ab * tokens * (h + padded_vocab(m.vocab, c.tp) / tp);
  // Each multi-token-prediction module: its layer, eh_proj's input (2h) and output gradient, and its head pass.
  if (stage == c.pp - 1 && m.mtp_layers > 0) {
    k.layers += m.mtp_layers * ab * tokens * (attention + (m.mtp_layer_moe() ? moe : dense) + 2.0 * h + h / tp);
    k.head *= 1.0 + m.mtp_layers;
  }
  return k;
}

double workspace_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c, int stage) {
  // In units of one token's values: [tokens, h] tensors with all tokens or (SP) this rank's share;
  // under context parallelism the rank's s/cp tokens.
  const double tokens = (t.seq_len > 0 ? t.seq_len : m.seq_len) * static_cast<double>(c.micro_batch) / c.cp;
  const double ab = t.activation_bytes;
  const double h = m.hidden, tp = c.tp;
  const double local_h = c.sequence_parallel ? h / tp : h;  // a [local tokens, h] tensor, per token
  const bool gated = m.activation == Activation::kSwiGLU;
  const double f = m.ffn_hidden / tp;  // a dense layer's
  const double f_in = gated ? 2.0 * f : f;
  const double q = static_cast<double>(m.q_dim());
  const double qkv = (q + 2.0 * static_cast<double>(m.kv_dim())) / tp;
  const double masked = m.dropout ? local_h : 0.0;  // a dropout's masked gradient
  const bool zb = c.schedule == Schedule::kZeroBubble;
  // Attention backward: the residual gradients, the projection's masked gradient, Q/K/V's gradient
  // beside the context's gradient (and, with selective recomputation, the softmax output rebuilt for
  // this backward with its dropout mask and output) or the input's gradient. `dy`: the output's
  // gradient, where it is a temporary (StageKinds).
  double core = 0;
  if (c.recompute == Recompute::kSelective && t.attention == AttentionKernel::kUnfused) {
    const double scores = m.heads / tp * (t.seq_len > 0 ? t.seq_len : m.seq_len);  // per token
    core = scores * (m.dropout ? 2.0 + 1.0 / ab : 1.0);
  }
  auto attention = [&](double dy, double kept_by_mlp) {
    if (!zb) return dy + masked + local_h + masked + qkv + std::max(q / tp + core, h);
    // Zero-bubble keeps what the MLP's W pass reads and Q/K/V's gradient: both are still there when the
    // input's gradient is reduce-scattered (all tokens beside the rank's share) and when the norm's
    // backward writes the layer's input gradient beside it.
    const double sp_share = c.sequence_parallel ? local_h : 0.0;
    return dy + masked + local_h + masked + qkv + kept_by_mlp + std::max({q / tp + core, h + sp_share, 2.0 * local_h});
  };
  // A row-parallel GEMM's output of all tokens beside its reduce-scattered share (forward), and the
  // head's backward on the last stage: the final norm's output gradient beside its input gradient.
  double worst = std::max(h + (c.sequence_parallel ? local_h : 0.0), stage == c.pp - 1 ? h + local_h : 0.0);
  // The head's backward where the compute dtype is narrower than the fp32 logits (bf16): the logits'
  // gradient in the compute dtype for the head's GEMMs (written at the end of the head's forward from the
  // fp32 logits, which it frees: exec/model/gpt_stage.cc) beside their input gradient (on an H200 the
  // whole of GPT-2 small's 0.78 GiB of workspace, 2026-11-28).
  if (stage == c.pp - 1 && ab < 4 && t.head_casts_logits_grad)
    worst = std::max(worst, h + padded_vocab(m.vocab, c.tp) / tp);
  const StageKinds kinds = stage_kinds(m, c, stage);
  if (kinds.dense) {
    // MLP backward: the output's gradient (and its masked copy), the residual's, the activation
    // function's input gradient beside its output gradient or the next projection's.
    const double dy = kinds.dense_dy ? local_h : 0.0;
    worst = std::max({worst, dy + masked + local_h + f_in + std::max(f, h), attention(dy, zb ? f_in : 0.0)});
  }
  if (kinds.moe) {
    const double dy = kinds.moe_dy ? local_h : 0.0;
    worst = std::max(
        {worst, moe_workspace(m, t, c, dy + masked + local_h), attention(dy, moe_zero_bubble_kept_work(m, t, c))});
  }
  return ab * tokens * worst;
}

ModelStateBytes model_state_bytes(double params, const TrainingSpec& t, int zero, int dp) {
  ModelStateBytes b;
  // FSDP2's shard is the fp32 master, counted in the optimizer's bytes (TrainingSpec::zero3_fp32_shards).
  b.params = zero >= 3 && t.zero3_fp32_shards ? 0.0 : params * t.param_bytes / (zero >= 3 ? dp : 1.0);
  b.grads = params * t.grad_bytes / (zero >= 2 ? dp : 1.0);
  b.optimizer = params * t.optimizer_bytes / (zero >= 1 ? dp : 1.0);
  return b;
}

// Op-level SAC (core/op_recompute.h) keeps per layer: the block's input (the checkpoint's), the outputs
// of the GEMMs it does not re-run — a column-parallel one's 1/t of its columns, a row-parallel one's
// whole partial sums before their reduce-scatter —, scaled-dot-product attention's output and fp32
// log-sum-exp, and under SP the two reduce-scatters' outputs. `sb` tokens (s/cp of each sequence).
struct OpKeptBytes {
  double rebuilt = 0;  // what the recompute takes and frees: QKV's and the MLP's up projection's kept column
                       // blocks, the attention projection's output and the first reduce-scatter's
  double shared = 0;   // what the rebuilt layer's working set holds as it is: the block input, attention's
                       // output and its log-sum-exp
  double left = 0;     // what the recompute stops short of, left in the checkpoint's storage until the
                       // layer's backward ends: the down projection's and the second reduce-scatter's outputs
  double total() const { return rebuilt + shared + left; }
  // Beside every kept tensor, the layer's forward at its MLP holds the residual, the norm's output and
  // statistics, the up projection's whole output and the activation's (and the two dropout masks).
  double forward_mlp = 0;
};
static OpKeptBytes op_recompute_kept_bytes(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c,
                                           double sb) {
  const OpRecompute r = op_recompute(m);
  const double h = m.hidden, tp = c.tp, ab = t.activation_bytes;
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double up = (m.activation == Activation::kSwiGLU ? 2.0 : 1.0) * m.ffn_hidden;
  const double sp_rows = c.sequence_parallel && c.tp > 1 ? h / tp : 0.0;  // a reduce-scatter's output
  const double input = sp_rows > 0 ? h / tp : h;
  return {
      .rebuilt = ab * sb *
                 ((1.0 - r.qkv) * (q + 2.0 * kv) / tp + (1.0 - r.attn_out) * h + (1.0 - r.mlp_up) * up / tp + sp_rows),
      .shared = ab * sb * (input + q / tp) + 4.0 * sb * m.heads / tp,
      .left = ab * sb * ((1.0 - r.mlp_down) * h + sp_rows),
      .forward_mlp = ab * sb * (2.0 * input + (up + m.ffn_hidden) / tp) + norm_statistics_bytes(m) * sb * input / h +
                     (m.dropout ? 2.0 * sb * input : 0.0)};
}

double activation_bytes_per_layer(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c) {
  return activation_bytes_per_layer_of(m, t, c, m.moe.active() ? m.moe_layer_fraction() : 0.0);
}

double activation_bytes_per_layer_of(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c,
                                     double moe_fraction) {
  // Context parallelism splits every activation along the sequence: a rank keeps its s/cp tokens'
  // (and flash attention's statistics of its s/cp query rows), Megatron-LM context_parallel.md.
  const double s = (t.seq_len > 0 ? t.seq_len : m.seq_len) / static_cast<double>(c.cp);
  const double b = c.micro_batch;
  const double ab = t.activation_bytes;
  const double sbh = s * b * m.hidden;
  const double tp = c.tp;
  const double replicated_divisor = c.sequence_parallel ? tp : 1.0;
  if (c.recompute == Recompute::kFull) return ab * sbh / replicated_divisor;  // the layer input only
  if (c.recompute == Recompute::kOp) return op_recompute_kept_bytes(m, t, c, s * b).total();
  const double lb = linear_input_bytes(t);
  // The layer's two norms' statistics sit with their inputs: split over TP only by sequence parallelism.
  const double norm_statistics = 2.0 * norm_statistics_bytes(m) * s * b;
  // A full-width QK-norm's 1/rms of Q and of K, per token, on every TP rank.
  const double qk_norm_statistics = m.qk_norm == QkNorm::kFullWidth ? 2.0 * 4.0 * s * b : 0.0;
  double bytes = (replicated_activation_bytes(m, sbh, ab, lb) + norm_statistics) / replicated_divisor +
                 qk_norm_statistics + dispatched_activation_bytes(m, t, c, s * b, lb, moe_fraction) +
                 tensor_parallel_activation_bytes(m, t, c, s * b, ab, lb, moe_fraction) / tp;
  const bool keep_core = c.recompute == Recompute::kNone || t.attention == AttentionKernel::kFlash;
  if (keep_core) bytes += attention_core_bytes(m, t, s, b, ab) / tp;
  return bytes;
}

double micro_batches_in_flight(const ParallelConfig& c, int stage, long long micro_batches) {
  const double m = static_cast<double>(micro_batches);
  switch (c.schedule) {
    case Schedule::kGPipe:
      return m;  // every forward finishes before the first backward
    // ZB-H1 runs 1F1B's forwards and B passes: what its pending W passes keep besides is counted apart
    // (zero_bubble_pending_w, zero_bubble_kept_bytes).
    case Schedule::k1F1B:
    case Schedule::kZeroBubble: return std::min<double>(c.pp - stage, m);
    case Schedule::kInterleaved: {
      // Megatron's warm-up: (p − i − 1)·2 + (v − 1)·p forwards of model chunks, plus the one in
      // progress; each chunk holds 1/v of the stage's layers. Stage 0: p + (p − 1)/v, which is
      // Korthikanti et al.'s p·(1 + (p − 1)/(p·v)).
      const double chunks = std::min<double>((c.pp - stage - 1) * 2.0 + (c.vpp - 1.0) * c.pp + 1.0, m * c.vpp);
      return chunks / c.vpp;
    }
  }
  return m;
}

MemoryBreakdownGiB MemoryReport::most_loaded_gib() const {
  const StageMemory& s = most_loaded();
  MemoryBreakdownGiB g;
  g.params = bytes_to_gib(s.params_bytes);
  g.grads = bytes_to_gib(s.grads_bytes);
  g.optimizer = bytes_to_gib(s.optimizer_bytes);
  g.activations = bytes_to_gib(s.activations_bytes);
  g.buffers = bytes_to_gib(s.buffers_bytes + s.reserve_bytes);
  g.total = bytes_to_gib(s.total_bytes());
  return g;
}

MemoryReport estimate_memory(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c,
                             const ClusterSpec& cluster) {
  MemoryReport report;
  report.capacity_bytes = cluster.device.memory_bytes;
  const long long micro_batches = std::max<long long>(1, c.micro_batches(t.global_batch));
  const double s = (t.seq_len > 0 ? t.seq_len : m.seq_len) / static_cast<double>(c.cp);  // this rank's tokens
  const double b = c.micro_batch;
  const double ab = t.activation_bytes;
  const double sbh = s * b * m.hidden;
  const double sp_divisor = c.sequence_parallel ? c.tp : 1.0;
  ParallelConfig no_recompute = c;
  no_recompute.recompute = Recompute::kNone;

  for (int stage = 0; stage < c.pp; ++stage) {
    StageMemory sm;
    sm.stage = stage;
    sm.layers = stage_layer_count(m.layers, c, stage);
    // Each stage's own layers: where MoE layers follow dense ones (DeepSeek's first_dense_layers) or
    // alternate with them, stages hold different mixes.
    const LayerMix mix = stage_layer_mix(m, c, stage);
    const double per_layer = activation_bytes_per_layer_of(m, t, c, mix.moe_fraction());
    // The largest layer's whole activations, which full recomputation rebuilds one layer at a time.
    // Multi-token prediction on the last stage (ModelSpec::mtp_layers): each module's layer is one more layer
    // of its kind, beside what the module keeps for its backward: enorm's and hnorm's inputs and statistics,
    // and eh_proj's input (their 2h-wide concatenation; under SP this rank's share).
    const bool mtp = stage == c.pp - 1 && m.mtp_layers > 0;
    const bool mtp_moe = mtp && m.mtp_layer_moe();
    const double mtp_per_micro_batch =
        mtp ? m.mtp_layers * (activation_bytes_per_layer_of(m, t, c, mtp_moe ? 1.0 : 0.0) +
                              (4.0 * ab * sbh + 2.0 * norm_statistics_bytes(m) * s * b) / sp_divisor)
            : 0.0;
    const bool dense_layer = mix.dense > 0 || (mtp && !mtp_moe), moe_layer = mix.moe > 0 || mtp_moe;
    const double layer_working_set =
        std::max(dense_layer ? activation_bytes_per_layer_of(m, t, no_recompute, 0.0) : 0.0,
                 moe_layer ? activation_bytes_per_layer_of(m, t, no_recompute, 1.0) : 0.0);
    const StageParams params = stage_params(m, c, stage);
    sm.param_count = params.total();
    const double n = sm.param_count;
    // Expert parallelism: the rank's routed experts are held by no other rank of its EP group, so ZeRO
    // shards their states over the expert-data-parallel group only (Megatron-core's distributed
    // optimizer over expt_dp); everything else over the whole group.
    ModelStateBytes states = model_state_bytes(n - params.experts, t, c.zero, c.zero_shards());
    const ModelStateBytes experts = model_state_bytes(params.experts, t, c.zero, c.expert_grad_ranks());
    states.params += experts.params;
    states.grads += experts.grads;
    states.optimizer += experts.optimizer;
    sm.params_bytes = states.params + fp8_weight_copy_bytes(t, c, cluster, params.layers);
    sm.grads_bytes = states.grads;
    sm.optimizer_bytes = states.optimizer;

    sm.activation_bytes_per_layer = per_layer;
    sm.micro_batches_in_flight = micro_batches_in_flight(c, stage, micro_batches);
    double activations = (per_layer * sm.layers + mtp_per_micro_batch) * sm.micro_batches_in_flight;
    // One micro-batch's activations on this stage at the peak after its forward (zero-bubble swaps them).
    double micro_batch_activations = per_layer * sm.layers + mtp_per_micro_batch;
    // Korthikanti et al. §4.3: the embedding's dropout mask on the first stage.
    if (stage == 0 && m.dropout) {
      activations += sbh / sp_divisor * sm.micro_batches_in_flight;
      micro_batch_activations += sbh / sp_divisor;
    }
    // A stage that sends its output on holds it beside every micro-batch in flight at the end of its
    // newest forward, until the send takes it (a send buffer from then on, p2p_buffer_bytes); the last
    // stage's output is the head's input, counted with the head below.
    const double output_before_send = stage < c.pp - 1 ? ab * sbh / sp_divisor : 0.0;
    // Full recompute rebuilds one layer's activations at a time during the backward. Op-level SAC
    // likewise re-runs one layer's forward at a time. What that layer kept is not held twice: its input
    // and attention's output are part of the working set, and the kept GEMM outputs the recompute takes
    // are copied in or consumed by the residual and freed (PyTorch's SAC cache pops each as the recompute
    // takes it). Only the outputs the recompute stops short of stay beside it. Its forward, at the MLP,
    // can hold more beside what it keeps (OpKeptBytes::forward_mlp): the larger of the two.
    OpKeptBytes op_kept;
    if (c.recompute == Recompute::kOp) op_kept = op_recompute_kept_bytes(m, t, c, s * b);
    const double recompute_working_set =
        c.recompute == Recompute::kFull ? layer_working_set
        : c.recompute == Recompute::kOp
            ? std::max(layer_working_set - op_kept.rebuilt - op_kept.shared, op_kept.forward_mlp)
            : 0.0;
    // The peak at the end of a forward, beside the one during a backward that the rest adds up.
    double forward_end = activations + output_before_send;
    if (stage == c.pp - 1) {
      // The final norm's input and statistics, the LM head's input and what the loss holds at its peak:
      // the fp32 logits the cross-entropy keeps (§4.3), or more where the framework's loss makes more
      // beside them (TrainingSpec::loss_bytes_per_logit). GPipe keeps every micro-batch's until the
      // backward, the other schedules one. The head's backward frees its own before any layer is
      // recomputed, so the peak holds the larger of the two, not both.
      const double vocab = padded_vocab(m.vocab, c.tp);
      const double logits = s * b * vocab / c.tp;
      // Each MTP module's head pass keeps the same beside the main one's until the backward; the loss's peak
      // beyond its kept logits is one loss's at a time.
      const double kept_head =
          (1.0 + m.mtp_layers) * ((2.0 * ab * sbh + norm_statistics_bytes(m) * s * b) / sp_divisor + 4.0 * logits);
      const double head = kept_head + (std::max(t.loss_bytes_per_logit, 4.0) - 4.0) * logits;
      const double heads_alive = c.schedule == Schedule::kGPipe ? static_cast<double>(micro_batches) : 1.0;
      activations += (heads_alive - 1.0) * kept_head + std::max(head, recompute_working_set);
      micro_batch_activations += std::max(head, recompute_working_set);
    } else {
      activations += recompute_working_set;
      micro_batch_activations += recompute_working_set;
    }
    // Zero-bubble: what each pending W pass reads, kept as activations from its layer's B pass on. A B
    // pass swaps the micro-batch's activations, layer by layer, for what its W keeps. Where that is more
    // (sequence parallelism keeps all-gathered copies, full recomputation only the layer inputs) the
    // peak moves into the B pass: at its end, or, recomputing, at its last layer, whose rebuilt working
    // set meets what the layers before it keep.
    if (c.schedule == Schedule::kZeroBubble && sm.layers > 0) {
      const ZeroBubbleKept kept = zero_bubble_kept(m, t, c, stage);
      sm.weight_pass_kept_bytes = kept.layers + kept.head;
      double during_b = kept.layers + kept.head;
      // In a B pass op-level SAC rebuilds the layer from what it kept (its forward's MLP peak, where the
      // kept blocks are copies beside the whole outputs, is the forward's, not the rebuild's).
      const double rebuild_working_set =
          c.recompute == Recompute::kOp ? layer_working_set - op_kept.rebuilt - op_kept.shared : recompute_working_set;
      if (rebuild_working_set > 0)
        during_b = std::max(during_b,
                            kept.head + kept.layers * (sm.layers - 1.0) / sm.layers + rebuild_working_set + per_layer);
      const double pending_w = zero_bubble_pending_w(c, stage, micro_batches) * (kept.layers + kept.head);
      activations +=
          pending_w + std::max(0.0, during_b - micro_batch_activations) * std::min(1.0, sm.micro_batches_in_flight);
      forward_end += pending_w;
    }
    sm.activations_bytes = std::max(activations, forward_end);

    // Data-parallel reductions run in place on the contiguous gradient buffer (Megatron-LM's
    // grad buffer, PyTorch DDP with gradient_as_bucket_view): no staging copy to count.
    sm.p2p_bytes = p2p_buffer_bytes(c, stage, ab * sbh / sp_divisor);
    // ZeRO-3 kept gathered through a pipeline (TrainingSpec::zero3_pp_keep_gathered): the stage's
    // parameters whole and its gradients accumulating unsharded, for the whole step.
    const double zero_buffers = c.zero3_gathered_through_pipeline(t.zero3_pp_keep_gathered)
                                    ? sm.param_count * (t.param_bytes + t.grad_bytes)
                                    : zero_buffer_bytes(m, t, c, stage);
    double buffers =
        zero_buffers + sm.p2p_bytes + cp_buffer_bytes(m, t, c, s * b) + fp8_amax_history_bytes(t, sm.layers);
    // The all-gathered input of a column-parallel GEMM (Megatron-LM's global memory buffer). Zero-bubble
    // keeps a layer's four (the MLP's output gradient and input, the projection's output gradient, QKV's
    // input) for its W pass: by the end of the layer's B pass all are alive.
    if (c.tp > 1 && c.sequence_parallel) buffers += (c.schedule == Schedule::kZeroBubble ? 4.0 : 1.0) * ab * sbh;
    sm.buffers_bytes = buffers;
    sm.workspace_bytes = workspace_bytes(m, t, c, stage);
    sm.reserve_bytes = cluster.framework_reserve_bytes + sm.workspace_bytes;
    report.stages.push_back(sm);
  }
  report.most_loaded_stage = 0;
  for (int i = 1; i < static_cast<int>(report.stages.size()); ++i)
    if (report.stages[i].total_bytes() > report.stages[report.most_loaded_stage].total_bytes())
      report.most_loaded_stage = i;
  report.fits = report.most_loaded_total_bytes() <= report.capacity_bytes;
  return report;
}

}  // namespace loom
