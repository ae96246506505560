#include "core/partition.h"

#include "core/pipeline_split.h"

namespace loom {

std::vector<LayerRun> chunk_layer_runs(const ModelSpec& m, const ParallelConfig& c, int stage, int chunk) {
  const int v = chunk * c.pp + stage;  // the virtual stage (core/schedule.h)
  const int count = virtual_stage_layer_count(m.layers, c, v);
  if (!m.moe.active()) return count > 0 ? std::vector<LayerRun>{{false, count}} : std::vector<LayerRun>{};
  std::vector<LayerRun> runs;
  for (int l = first_layer_of(m.layers, c, v), end = l + count; l < end; ++l) {
    const bool moe = m.is_moe_layer(l);
    if (runs.empty() || runs.back().moe != moe) runs.push_back({moe, 0});
    ++runs.back().count;
  }
  return runs;
}

LayerMix chunk_layer_mix(const ModelSpec& m, const ParallelConfig& c, int stage, int chunk) {
  // A dense model's chunk without building its runs: the planner asks for every stage of every layout.
  if (!m.moe.active()) return {virtual_stage_layer_count(m.layers, c, chunk * c.pp + stage), 0};
  LayerMix mix;
  for (const LayerRun& run : chunk_layer_runs(m, c, stage, chunk)) (run.moe ? mix.moe : mix.dense) += run.count;
  return mix;
}

LayerMix stage_layer_mix(const ModelSpec& m, const ParallelConfig& c, int stage) {
  LayerMix mix;
  for (int chunk = 0; chunk < c.vpp; ++chunk) {
    const LayerMix part = chunk_layer_mix(m, c, stage, chunk);
    mix.dense += part.dense;
    mix.moe += part.moe;
  }
  return mix;
}

namespace {

// One dense layer's and one MoE layer's parameters on a TP rank, and of the MoE layer's, its routed experts.
struct KindParams {
  double dense = 0, moe = 0, routed = 0;
};

KindParams kind_params_per_tp_rank(const ModelSpec& m, int tp) {
  const double h = m.hidden;
  // Replicated on every TP rank: the norms (per-head QK-norm's too: every rank's heads use them), row-parallel
  // biases (attention output; dense MLP down, each expert's down), the router and the shared expert's gate, MLA's
  // latent norms and its down-projections (Megatron-core builds those as duplicated linears). The rest splits t
  // ways, full-width QK-norm weights with their heads.
  double replicated = 2.0 * static_cast<double>(m.norm_params()) + (m.linear_bias ? h : 0.0) +
                      (m.qk_norm == QkNorm::kPerHead ? static_cast<double>(m.qk_norm_params()) : 0.0);
  if (m.mla.active())
    replicated += (m.mla.q_lora_rank > 0 ? h * m.mla.q_lora_rank + m.mla.q_lora_rank : 0.0) +
                  h * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) + m.mla.kv_lora_rank;
  const double common = static_cast<double>(m.attention_params()) + 2.0 * static_cast<double>(m.norm_params());
  KindParams k;
  const double dense_replicated = replicated + (m.linear_bias ? h : 0.0);  // the MLP down projection's bias
  k.dense = (common + static_cast<double>(m.mlp_params()) - dense_replicated) / tp + dense_replicated;
  if (m.moe.active()) {
    const double moe_replicated = replicated + h * m.moe.experts + (m.moe.expert_bias ? m.moe.experts : 0.0) +
                                  (m.moe.shared_gate ? h : 0.0) + (m.moe.expert_bias ? h * m.moe.experts : 0.0);
    k.moe = (common + static_cast<double>(m.moe_params(false)) - moe_replicated) / tp + moe_replicated;
    // Each expert's down bias is replicated over TP (row-parallel), the rest split t ways.
    const double down_biases = m.moe.expert_bias ? h * m.moe.experts : 0.0;
    k.routed = (static_cast<double>(m.routed_expert_params()) - down_biases) / tp + down_biases;
  }
  return k;
}

}  // namespace

double layer_params_per_tp_rank(const ModelSpec& m, int tp) {
  const KindParams k = kind_params_per_tp_rank(m, tp);
  const double moe = m.moe_layers();
  return ((m.layers - moe) * k.dense + moe * k.moe) / m.layers;
}

double routed_expert_params_per_tp_rank(const ModelSpec& m, int tp) {
  if (!m.moe.active()) return 0.0;
  return kind_params_per_tp_rank(m, tp).routed * m.moe_layers() / m.layers;
}

double layer_params_per_rank(const ModelSpec& m, int tp, int ep, int etp) {
  return layer_params_per_tp_rank(m, tp) - routed_expert_params_per_tp_rank(m, tp) +
         routed_expert_params_per_tp_rank(m, etp > 0 ? etp : tp) / ep;
}

double routed_expert_params_per_rank(const ModelSpec& m, const ParallelConfig& c) {
  return routed_expert_params_per_tp_rank(m, c.expert_tp()) / c.ep;
}

double routed_expert_params_per_rank(const ModelSpec& m, const ParallelConfig& c, const LayerMix& mix) {
  return mix.moe > 0 ? mix.moe * kind_params_per_tp_rank(m, c.expert_tp()).routed / c.ep : 0.0;
}

double layers_params_per_rank(const ModelSpec& m, const ParallelConfig& c, const LayerMix& mix) {
  const KindParams k = kind_params_per_tp_rank(m, c.tp);
  return mix.dense * k.dense + mix.moe * (k.moe - k.routed) + routed_expert_params_per_rank(m, c, mix);
}

double mtp_expert_params_per_rank(const ModelSpec& m, const ParallelConfig& c) {
  if (m.mtp_layers <= 0 || !m.mtp_layer_moe()) return 0.0;
  return m.mtp_layers * routed_expert_params_per_rank(m, c, LayerMix{0, 1});
}

StageParams stage_params(const ModelSpec& m, const ParallelConfig& c, int stage) {
  const int vocab = padded_vocab(m.vocab, c.tp);
  const double word_embedding = static_cast<double>(vocab) * m.hidden / c.tp;
  StageParams p;
  const LayerMix mix = stage_layer_mix(m, c, stage);
  p.layers = layers_params_per_rank(m, c, mix);
  p.experts = routed_expert_params_per_rank(m, c, mix);
  if (stage == 0) {
    p.embedding = word_embedding;
    if (m.position == PositionEmbedding::kLearned) p.embedding += static_cast<double>(m.seq_len) * m.hidden;
  }
  if (stage == c.pp - 1) {
    p.head = static_cast<double>(m.norm_params());
    // Untied: its own LM head. Tied with pp > 1: Megatron keeps a copy of the word embedding on
    // the last stage and all-reduces the two gradients. Tied with pp == 1: shared, counted once.
    if (!m.tied_embeddings || c.pp > 1) p.head += word_embedding;
    if (m.mtp_layers > 0) {
      // Each module: its layer as the decoder's of that kind, eh_proj (column-parallel, 2h·h/tp) and three
      // norms (replicated).
      const LayerMix kind = m.mtp_layer_moe() ? LayerMix{0, 1} : LayerMix{1, 0};
      const double h = m.hidden;
      p.mtp = m.mtp_layers * (layers_params_per_rank(m, c, kind) + 2.0 * h * h / c.tp + 3.0 * m.norm_params());
      if (!m.tied_embeddings && c.pp > 1) p.mtp += word_embedding;
      p.experts += mtp_expert_params_per_rank(m, c);
    }
  }
  return p;
}

}  // namespace loom
