#include "core/partition.h"

#include "core/pipeline_split.h"

namespace loom {

double layer_params_per_tp_rank(const ModelSpec& m, int tp) {
  const double h = m.hidden;
  // Replicated on every TP rank: the norms, row-parallel biases (attention output; dense MLP down,
  // each expert's down), the router and the shared expert's gate, MLA's latent norms and its
  // down-projections (Megatron-core builds those as duplicated linears). The rest splits t ways.
  double replicated = 2.0 * static_cast<double>(m.norm_params()) + (m.linear_bias ? h : 0.0);
  if (m.mla.active())
    replicated += (m.mla.q_lora_rank > 0 ? h * m.mla.q_lora_rank + m.mla.q_lora_rank : 0.0) +
                  h * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) + m.mla.kv_lora_rank;
  const double moe_layers = m.moe_layers(), dense_layers = m.layers - moe_layers;
  const double dense_down_bias = m.linear_bias ? h : 0.0;
  const double moe_replicated = m.moe.active()
                                    ? h * m.moe.experts + (m.moe.expert_bias ? m.moe.experts : 0.0) +
                                          (m.moe.shared_gate ? h : 0.0) + (m.moe.expert_bias ? h * m.moe.experts : 0.0)
                                    : 0.0;
  replicated += (dense_layers * dense_down_bias + moe_layers * moe_replicated) / m.layers;
  const double mean = static_cast<double>(m.layers_params()) / m.layers;
  return (mean - replicated) / tp + replicated;
}

double routed_expert_params_per_tp_rank(const ModelSpec& m, int tp) {
  if (!m.moe.active()) return 0.0;
  // Each expert's down bias is replicated over TP (row-parallel), the rest split t ways.
  const double down_biases = m.moe.expert_bias ? static_cast<double>(m.hidden) * m.moe.experts : 0.0;
  const double per_layer = (static_cast<double>(m.routed_expert_params()) - down_biases) / tp + down_biases;
  return per_layer * m.moe_layers() / m.layers;
}

double layer_params_per_rank(const ModelSpec& m, int tp, int ep, int etp) {
  return layer_params_per_tp_rank(m, tp) - routed_expert_params_per_tp_rank(m, tp) +
         routed_expert_params_per_tp_rank(m, etp > 0 ? etp : tp) / ep;
}

double routed_expert_params_per_rank(const ModelSpec& m, const ParallelConfig& c) {
  return routed_expert_params_per_tp_rank(m, c.expert_tp()) / c.ep;
}

StageParams stage_params(const ModelSpec& m, const ParallelConfig& c, int stage) {
  const int vocab = padded_vocab(m.vocab, c.tp);
  const double word_embedding = static_cast<double>(vocab) * m.hidden / c.tp;
  StageParams p;
  const int layers = stage_layer_count(m.layers, c, stage);
  p.layers = layer_params_per_rank(m, c.tp, c.ep, c.etp) * layers;
  p.experts = routed_expert_params_per_rank(m, c) * layers;
  if (stage == 0) {
    p.embedding = word_embedding;
    if (m.position == PositionEmbedding::kLearned) p.embedding += static_cast<double>(m.seq_len) * m.hidden;
  }
  if (stage == c.pp - 1) {
    p.head = static_cast<double>(m.norm_params());
    // Untied: its own LM head. Tied with pp > 1: Megatron keeps a copy of the word embedding on
    // the last stage and all-reduces the two gradients. Tied with pp == 1: shared, counted once.
    if (!m.tied_embeddings || c.pp > 1) p.head += word_embedding;
  }
  return p;
}

}  // namespace loom
