#include "core/partition.h"

#include "core/pipeline_split.h"

namespace loom {

double layer_params_per_tp_rank(const ModelSpec& m, int tp) {
  const double h = m.hidden;
  const double kv = static_cast<double>(m.kv_dim());
  const double f = m.ffn_hidden;
  const bool swiglu = m.activation == Activation::kSwiGLU;
  const double matrices = 2.0 * h * h + 2.0 * h * kv + (swiglu ? 3.0 : 2.0) * h * f;
  const double column_bias = m.linear_bias ? (h + 2.0 * kv + (swiglu ? 2.0 : 1.0) * f) : 0.0;
  const double row_bias = m.linear_bias ? 2.0 * h : 0.0;
  return (matrices + column_bias) / tp + row_bias + 2.0 * static_cast<double>(m.norm_params());
}

StageParams stage_params(const ModelSpec& m, const ParallelConfig& c, int stage) {
  const int vocab = padded_vocab(m.vocab, c.tp);
  const double word_embedding = static_cast<double>(vocab) * m.hidden / c.tp;
  StageParams p;
  p.layers = layer_params_per_tp_rank(m, c.tp) * stage_layer_count(m.layers, c, stage);
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
