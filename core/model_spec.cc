#include "core/model_spec.h"

namespace loom {

std::int64_t ModelSpec::attention_params() const {
  const std::int64_t h = hidden;
  const std::int64_t q_and_out = 2 * h * q_dim();
  const std::int64_t kv = 2 * h * kv_dim();
  const std::int64_t bias = linear_bias ? (q_dim() + 2 * kv_dim() + h) : 0;
  return q_and_out + kv + bias;
}

std::int64_t ModelSpec::mlp_params() const {
  const std::int64_t h = hidden;
  const std::int64_t f = ffn_hidden;
  const std::int64_t matrices = activation == Activation::kSwiGLU ? 3 * h * f : 2 * h * f;
  const std::int64_t up_width = activation == Activation::kSwiGLU ? 2 * f : f;
  const std::int64_t bias = linear_bias ? (up_width + h) : 0;
  return matrices + bias;
}

std::int64_t ModelSpec::norm_params() const {
  return norm == Norm::kLayerNorm ? 2LL * hidden : static_cast<std::int64_t>(hidden);
}

std::int64_t ModelSpec::params_per_layer() const { return attention_params() + mlp_params() + 2 * norm_params(); }

std::int64_t ModelSpec::embedding_params(int padded) const {
  std::int64_t params = static_cast<std::int64_t>(padded) * hidden;
  if (position == PositionEmbedding::kLearned) params += static_cast<std::int64_t>(seq_len) * hidden;
  return params;
}

std::int64_t ModelSpec::lm_head_params(int padded) const {
  return tied_embeddings ? 0 : static_cast<std::int64_t>(padded) * hidden;
}

std::int64_t ModelSpec::total_params() const {
  return layers * params_per_layer() + embedding_params(vocab) + lm_head_params(vocab) + norm_params();
}

double ModelSpec::layer_linear_flops_fwd(double tokens) const {
  const double h = hidden;
  const double qkv = h * (static_cast<double>(q_dim()) + 2.0 * kv_dim());
  const double out = h * static_cast<double>(q_dim());
  const double mlp = (activation == Activation::kSwiGLU ? 3.0 : 2.0) * h * ffn_hidden;
  return 2.0 * tokens * (qkv + out + mlp);
}

double ModelSpec::layer_attention_flops_fwd(double tokens, int seq) const {
  // QK^T and softmax·V: 2 matmuls of (s × d) by (d × s) per head, 2 FLOPs per MAC, full (unmasked)
  // square as Megatron counts it (Narayanan et al. 2021, eq. 3).
  return 2.0 * 2.0 * tokens * static_cast<double>(seq) * static_cast<double>(q_dim());
}

double ModelSpec::lm_head_flops_fwd(double tokens, int padded) const {
  return 2.0 * tokens * static_cast<double>(hidden) * padded;
}

int padded_vocab(int vocab, int tp) {
  const int multiple = 128 * tp;
  return ((vocab + multiple - 1) / multiple) * multiple;
}

}  // namespace loom
