#include "planner/memory_model.h"

#include <algorithm>
#include <cmath>

#include "core/partition.h"
#include "core/units.h"

namespace loom {

namespace {

// Activation bytes of the parts of a layer outside the tensor-parallel regions (norm inputs and
// outputs, dropout masks): replicated across TP ranks unless sequence parallelism splits them.
double replicated_activation_bytes(const ModelSpec& m, double sbh, double ab) {
  const double norm_inputs = 2.0 * ab * sbh;
  const double norm_outputs = 2.0 * ab * sbh;  // inputs of the QKV and MLP-up projections
  const double dropout_masks = m.dropout ? 2.0 * sbh : 0.0;  // 1 byte per element
  return norm_inputs + norm_outputs + dropout_masks;
}

// Activation bytes inside the TP regions, before dividing by t: Q, K, V, projection input, MLP.
double tensor_parallel_activation_bytes(const ModelSpec& m, double sb, double ab) {
  const double h = m.hidden;
  const double kv = static_cast<double>(m.kv_dim());
  const double f = m.ffn_hidden;
  const double attention = ab * sb * (h + 2.0 * kv) + ab * sb * h;  // Q, K, V; attention output
  const double mlp = (m.activation == Activation::kSwiGLU ? 3.0 : 2.0) * ab * sb * f;
  return attention + mlp;
}

// The s×s attention core: softmax output, dropout mask and dropout output (5as²b at 2 bytes).
double attention_core_bytes(const ModelSpec& m, const TrainingSpec& t, double s, double b, double ab) {
  const double a = m.heads;
  if (t.attention == AttentionKernel::kFlash) return 4.0 * a * s * b;  // fp32 log-sum-exp per row
  const double scores = a * s * s * b;
  return m.dropout ? (2.0 * ab + 1.0) * scores : ab * scores;
}

}  // namespace

ModelStateBytes model_state_bytes(double params, const TrainingSpec& t, int zero, int dp) {
  ModelStateBytes b;
  b.params = params * t.param_bytes / (zero >= 3 ? dp : 1.0);
  b.grads = params * t.grad_bytes / (zero >= 2 ? dp : 1.0);
  b.optimizer = params * t.optimizer_bytes / (zero >= 1 ? dp : 1.0);
  return b;
}

double activation_bytes_per_layer(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c) {
  const double s = t.seq_len > 0 ? t.seq_len : m.seq_len;
  const double b = c.micro_batch;
  const double ab = t.activation_bytes;
  const double sbh = s * b * m.hidden;
  const double tp = c.tp;
  const double replicated_divisor = c.sequence_parallel ? tp : 1.0;
  if (c.recompute == Recompute::kFull) return ab * sbh / replicated_divisor;  // the layer input only
  double bytes = replicated_activation_bytes(m, sbh, ab) / replicated_divisor +
                 tensor_parallel_activation_bytes(m, s * b, ab) / tp;
  const bool keep_core = c.recompute == Recompute::kNone || t.attention == AttentionKernel::kFlash;
  if (keep_core) bytes += attention_core_bytes(m, t, s, b, ab) / tp;
  return bytes;
}

double micro_batches_in_flight(const ParallelConfig& c, int stage, long long micro_batches) {
  const double m = static_cast<double>(micro_batches);
  switch (c.schedule) {
    case Schedule::kGPipe:
      return m;  // every forward finishes before the first backward
    case Schedule::k1F1B:
      return std::min<double>(c.pp - stage, m);
    case Schedule::kZeroBubble:
      // ZB-H1 defers up to s weight-gradient passes on stage s, whose inputs stay alive: every
      // stage holds p micro-batches, the first stage's 1F1B peak (Qi et al. 2024, §3.1).
      return std::min<double>(c.pp, m);
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
  const double s = t.seq_len > 0 ? t.seq_len : m.seq_len;
  const double b = c.micro_batch;
  const double ab = t.activation_bytes;
  const double sbh = s * b * m.hidden;
  const double dp = c.dp;
  const double sp_divisor = c.sequence_parallel ? c.tp : 1.0;
  const double per_layer = activation_bytes_per_layer(m, t, c);
  const double layer_params = layer_params_per_tp_rank(m, c.tp);

  ParallelConfig no_recompute = c;
  no_recompute.recompute = Recompute::kNone;
  const double layer_working_set = activation_bytes_per_layer(m, t, no_recompute);

  for (int stage = 0; stage < c.pp; ++stage) {
    StageMemory sm;
    sm.stage = stage;
    sm.layers = m.layers / c.pp;
    const StageParams params = stage_params(m, c, stage);
    sm.param_count = params.total();
    const double n = sm.param_count;
    const ModelStateBytes states = model_state_bytes(n, t, c.zero, c.dp);
    sm.params_bytes = states.params;
    sm.grads_bytes = states.grads;
    sm.optimizer_bytes = states.optimizer;

    sm.activation_bytes_per_layer = per_layer;
    sm.micro_batches_in_flight = micro_batches_in_flight(c, stage, micro_batches);
    double activations = per_layer * sm.layers * sm.micro_batches_in_flight;
    // Korthikanti et al. §4.3: the embedding's dropout mask on the first stage.
    if (stage == 0 && m.dropout) activations += sbh / sp_divisor * sm.micro_batches_in_flight;
    // Full recompute rebuilds one layer's activations at a time during the backward.
    const double recompute_working_set = c.recompute == Recompute::kFull ? layer_working_set : 0.0;
    if (stage == c.pp - 1) {
      // The final norm's input, the LM head's input and the fp32 logits the cross-entropy keeps
      // (§4.3). GPipe keeps every micro-batch's until the backward, the other schedules one. The
      // head's backward frees its own before any layer is recomputed, so the peak holds the larger
      // of the two, not both.
      const double vocab = padded_vocab(m.vocab, c.tp);
      const double head = 2.0 * ab * sbh / sp_divisor + 4.0 * s * b * vocab / c.tp;
      const double heads_alive = c.schedule == Schedule::kGPipe ? static_cast<double>(micro_batches) : 1.0;
      activations += (heads_alive - 1.0) * head + std::max(head, recompute_working_set);
    } else {
      activations += recompute_working_set;
    }
    sm.activations_bytes = activations;

    double buffers = 0;
    // Data-parallel reductions run in place on the contiguous gradient buffer (Megatron-LM's
    // grad buffer, PyTorch DDP with gradient_as_bucket_view): no staging copy to count.
    if (c.zero >= 3) {
      // The gathered layer being computed plus the prefetched next one, and its unsharded grads.
      buffers += 2.0 * layer_params * t.param_bytes + layer_params * t.grad_bytes;
    }
    if (c.pp > 1) buffers += 2.0 * ab * sbh / sp_divisor;  // one send and one receive buffer
    if (c.tp > 1 && c.sequence_parallel) buffers += ab * sbh;  // all-gathered norm output
    sm.buffers_bytes = buffers;
    sm.reserve_bytes = cluster.framework_reserve_bytes;
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
