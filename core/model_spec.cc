#include "core/model_spec.h"

namespace loom {

namespace {
// A gated (SwiGLU/GeGLU) or plain MLP of inner width f on hidden h, with biases or not.
std::int64_t mlp_block_params(std::int64_t h, std::int64_t f, bool gated, bool bias) {
  const std::int64_t up_width = gated ? 2 * f : f;
  return h * up_width + f * h + (bias ? up_width + h : 0);
}
}  // namespace

std::int64_t ModelSpec::attention_params() const {
  const std::int64_t h = hidden;
  const std::int64_t sinks = attention_sinks ? heads : 0;
  if (mla.active()) {
    // DeepSeek-V2 MLA: Q (directly or through its latent and that latent's norm), the joint K/V latent
    // with the decoupled RoPE key, the latent's norm, its up-projection to per-head K (no-RoPE part) and V,
    // and the output projection.
    const std::int64_t qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
    const std::int64_t q =
        mla.q_lora_rank > 0 ? h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * qk : h * heads * qk;
    const std::int64_t kv =
        h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank +
        static_cast<std::int64_t>(mla.kv_lora_rank) * heads * (mla.qk_nope_head_dim + mla.v_head_dim);
    const std::int64_t out = static_cast<std::int64_t>(heads) * mla.v_head_dim * h;
    return q + kv + out + sinks;
  }
  const std::int64_t q_and_out = 2 * h * q_dim();
  const std::int64_t kv = 2 * h * kv_dim();
  const std::int64_t qkv_b = linear_bias || qkv_bias ? q_dim() + 2 * kv_dim() : 0;
  const std::int64_t out_b = linear_bias ? h : 0;
  return q_and_out + kv + qkv_b + out_b + sinks;
}

std::int64_t ModelSpec::mlp_params() const {
  return mlp_block_params(hidden, ffn_hidden, activation == Activation::kSwiGLU, linear_bias);
}

std::int64_t ModelSpec::moe_params(bool active_only) const {
  const bool gated = activation == Activation::kSwiGLU;
  const std::int64_t h = hidden;
  const std::int64_t router = h * moe.experts + (moe.expert_bias ? moe.experts : 0);
  const std::int64_t routed = active_only ? moe.experts_per_token : moe.experts;
  const std::int64_t shared =
      moe.shared_ffn > 0 ? mlp_block_params(h, moe.shared_ffn, gated, false) + (moe.shared_gate ? h : 0) : 0;
  return router + routed * mlp_block_params(h, moe.expert_ffn, gated, moe.expert_bias) + shared;
}

std::int64_t ModelSpec::norm_params() const {
  return norm == Norm::kLayerNorm ? 2LL * hidden : static_cast<std::int64_t>(hidden);
}

bool ModelSpec::is_moe_layer(int layer) const {
  if (!moe.active() || layer < moe.first_dense_layers) return false;
  return (layer - moe.first_dense_layers) % (moe.layer_freq > 0 ? moe.layer_freq : 1) == 0;
}

int ModelSpec::moe_layers() const {
  int n = 0;
  for (int l = 0; l < layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

std::int64_t ModelSpec::layer_params(int layer, bool active_only) const {
  const std::int64_t ffn = is_moe_layer(layer) ? moe_params(active_only) : mlp_params();
  return attention_params() + ffn + 2 * norm_params();
}

std::int64_t ModelSpec::layers_params(bool active_only) const {
  const std::int64_t moe_count = moe_layers();
  const std::int64_t dense = attention_params() + mlp_params() + 2 * norm_params();
  return (layers - moe_count) * dense +
         (moe_count > 0 ? moe_count * layer_params(moe.first_dense_layers, active_only) : 0);
}

std::int64_t ModelSpec::embedding_params(int padded) const {
  std::int64_t params = static_cast<std::int64_t>(padded) * hidden;
  if (position == PositionEmbedding::kLearned) params += static_cast<std::int64_t>(seq_len) * hidden;
  return params;
}

std::int64_t ModelSpec::lm_head_params(int padded) const {
  return tied_embeddings ? 0 : static_cast<std::int64_t>(padded) * hidden;
}

std::int64_t ModelSpec::total_params() const {
  return layers_params() + embedding_params(vocab) + lm_head_params(vocab) + norm_params();
}

std::int64_t ModelSpec::active_params() const {
  return layers_params(true) + embedding_params(vocab) + lm_head_params(vocab) + norm_params();
}

double ModelSpec::moe_layer_fraction() const { return layers > 0 ? static_cast<double>(moe_layers()) / layers : 0.0; }

double ModelSpec::mean_mlp_ffn() const {
  const double f = moe_layer_fraction();
  const double moe_ffn = static_cast<double>(moe.experts_per_token) * moe.expert_ffn + moe.shared_ffn;
  return (1.0 - f) * ffn_hidden + f * moe_ffn;
}

double ModelSpec::layer_linear_flops_fwd(double tokens) const {
  // Every weight of a layer's linear layers takes part in one multiply-add per token, except the
  // experts a token is not routed to: 2 FLOPs per active weight per token. Biases, norms and sinks
  // are not matmul weights.
  const double h = hidden;
  const bool gated = activation == Activation::kSwiGLU;
  const double attention =
      static_cast<double>(attention_params()) - (attention_sinks ? heads : 0) -
      (mla.active() ? mla.kv_lora_rank + mla.q_lora_rank
                    : (linear_bias || qkv_bias ? q_dim() + 2.0 * kv_dim() : 0.0) + (linear_bias ? h : 0.0));
  const double dense_mlp = (gated ? 3.0 : 2.0) * h * ffn_hidden;
  double moe_mlp = 0;
  if (moe.active())
    moe_mlp = h * moe.experts +
              (gated ? 3.0 : 2.0) * h * (static_cast<double>(moe.experts_per_token) * moe.expert_ffn + moe.shared_ffn) +
              (moe.shared_gate ? h : 0.0);
  const double moe_count = moe_layers();
  const double mlp = ((layers - moe_count) * dense_mlp + moe_count * moe_mlp) / layers;
  return 2.0 * tokens * (attention + mlp);
}

double ModelSpec::layer_attention_flops_fwd(double tokens, int seq) const {
  // QK^T and softmax·V: 2 matmuls of (s × d) by (d × s) per head, 2 FLOPs per MAC, full (unmasked)
  // square as Megatron counts it (Narayanan et al. 2021, eq. 3). MLA: Q·K over nope + rope dims, P·V over v.
  const double width = mla.active() ? heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) / 2.0
                                    : static_cast<double>(q_dim());
  return 2.0 * 2.0 * tokens * static_cast<double>(seq) * width;
}

double ModelSpec::lm_head_flops_fwd(double tokens, int padded) const {
  return 2.0 * tokens * static_cast<double>(hidden) * padded;
}

int padded_vocab(int vocab, int tp) {
  const int multiple = 128 * tp;
  return ((vocab + multiple - 1) / multiple) * multiple;
}

}  // namespace loom
