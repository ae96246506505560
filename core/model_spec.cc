#include "core/model_spec.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom {

namespace {

// One definition of every parameter count, evaluated in T = std::int64_t for the counts callers use
// and in T = double for check_model_size, which must not wrap around on absurd shapes.
template <typename T>
T mlp_block_params(T h, T f, bool gated, bool bias) {
  const T up_width = gated ? 2 * f : f;
  return h * up_width + f * h + (bias ? up_width + h : 0);
}

// QK-norm's weights: head_dim for Q's heads and for K's (per head), or as wide as Q and K (full width).
template <typename T>
T qk_norm_params_as(const ModelSpec& m) {
  const T head_dim = m.head_dim();
  switch (m.qk_norm) {
    case QkNorm::kNone: return 0;
    case QkNorm::kPerHead: return 2 * head_dim;
    case QkNorm::kFullWidth: return (static_cast<T>(m.heads) + m.kv_heads) * head_dim;
  }
  return 0;
}

template <typename T>
T attention_params_as(const ModelSpec& m) {
  const T h = m.hidden;
  const T heads = m.heads;
  const T sinks = m.attention_sinks ? heads : 0;
  if (m.mla.active()) {
    // DeepSeek-V2 MLA: Q (directly or through its latent and that latent's norm), the joint K/V latent
    // with the decoupled RoPE key, the latent's norm, its up-projection to per-head K (no-RoPE part) and V,
    // and the output projection.
    const T q_lora = m.mla.q_lora_rank, kv_lora = m.mla.kv_lora_rank;
    const T qk = static_cast<T>(m.mla.qk_nope_head_dim) + m.mla.qk_rope_head_dim;
    const T q = q_lora > 0 ? h * q_lora + q_lora + q_lora * heads * qk : h * heads * qk;
    const T kv = h * (kv_lora + m.mla.qk_rope_head_dim) + kv_lora +
                 kv_lora * heads * (static_cast<T>(m.mla.qk_nope_head_dim) + m.mla.v_head_dim);
    const T out = heads * m.mla.v_head_dim * h;
    return q + kv + out + sinks;
  }
  const T head_dim = m.head_dim();
  const T q_dim = heads * head_dim, kv_dim = static_cast<T>(m.kv_heads) * head_dim;
  const T q_and_out = 2 * h * q_dim;
  const T kv = 2 * h * kv_dim;
  const T qkv_b = m.linear_bias || m.qkv_bias ? q_dim + 2 * kv_dim : 0;
  const T out_b = m.linear_bias ? h : 0;
  return q_and_out + kv + qkv_b + out_b + sinks + qk_norm_params_as<T>(m);
}

template <typename T>
T mlp_params_as(const ModelSpec& m) {
  return mlp_block_params<T>(m.hidden, m.ffn_hidden, m.activation == Activation::kSwiGLU, m.linear_bias);
}

template <typename T>
T moe_params_as(const ModelSpec& m, bool active_only) {
  const bool gated = m.activation == Activation::kSwiGLU;
  const T h = m.hidden;
  const T experts = m.moe.experts;
  const T router = h * experts + (m.moe.expert_bias ? experts : 0);
  const T routed = active_only ? m.moe.experts_per_token : m.moe.experts;
  const T shared =
      m.moe.shared_ffn > 0 ? mlp_block_params<T>(h, m.moe.shared_ffn, gated, false) + (m.moe.shared_gate ? h : 0) : 0;
  return router + routed * mlp_block_params<T>(h, m.moe.expert_ffn, gated, m.moe.expert_bias) + shared;
}

template <typename T>
T norm_params_as(const ModelSpec& m) {
  return m.norm == Norm::kLayerNorm ? 2 * static_cast<T>(m.hidden) : static_cast<T>(m.hidden);
}

template <typename T>
T layer_params_as(const ModelSpec& m, int layer, bool active_only) {
  const T ffn = m.is_moe_layer(layer) ? moe_params_as<T>(m, active_only) : mlp_params_as<T>(m);
  return attention_params_as<T>(m) + ffn + 2 * norm_params_as<T>(m);
}

template <typename T>
T layers_params_as(const ModelSpec& m, bool active_only) {
  const T moe_count = m.moe_layers();
  const T dense = attention_params_as<T>(m) + mlp_params_as<T>(m) + 2 * norm_params_as<T>(m);
  return (m.layers - moe_count) * dense +
         (moe_count > 0 ? moe_count * layer_params_as<T>(m, m.moe.first_dense_layers, active_only) : 0);
}

template <typename T>
T embedding_params_as(const ModelSpec& m, T padded) {
  T params = padded * m.hidden;
  if (m.position == PositionEmbedding::kLearned) params += static_cast<T>(m.seq_len) * m.hidden;
  return params;
}

template <typename T>
T total_params_as(const ModelSpec& m) {
  const T vocab = m.vocab;
  const T lm_head = m.tied_embeddings ? 0 : vocab * m.hidden;
  return layers_params_as<T>(m, false) + embedding_params_as<T>(m, vocab) + lm_head + norm_params_as<T>(m);
}

}  // namespace

std::int64_t ModelSpec::attention_params() const { return attention_params_as<std::int64_t>(*this); }

std::int64_t ModelSpec::mlp_params() const { return mlp_params_as<std::int64_t>(*this); }

std::int64_t ModelSpec::moe_params(bool active_only) const { return moe_params_as<std::int64_t>(*this, active_only); }
std::int64_t ModelSpec::routed_expert_params() const {
  if (!moe.active()) return 0;
  return static_cast<std::int64_t>(moe.experts) *
         mlp_block_params<std::int64_t>(hidden, moe.expert_ffn, activation == Activation::kSwiGLU, moe.expert_bias);
}

std::int64_t ModelSpec::norm_params() const { return norm_params_as<std::int64_t>(*this); }

std::int64_t ModelSpec::qk_norm_params() const { return qk_norm_params_as<std::int64_t>(*this); }

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
  return layer_params_as<std::int64_t>(*this, layer, active_only);
}

std::int64_t ModelSpec::layers_params(bool active_only) const {
  return layers_params_as<std::int64_t>(*this, active_only);
}

std::int64_t ModelSpec::embedding_params(int padded) const { return embedding_params_as<std::int64_t>(*this, padded); }

std::int64_t ModelSpec::lm_head_params(int padded) const {
  return tied_embeddings ? 0 : static_cast<std::int64_t>(padded) * hidden;
}

std::int64_t ModelSpec::total_params() const { return total_params_as<std::int64_t>(*this); }

std::int64_t ModelSpec::active_params() const {
  return layers_params(true) + embedding_params(vocab) + lm_head_params(vocab) + norm_params();
}

Status check_model_size(const ModelSpec& model, const std::string& what) {
  // In double, which cannot wrap: the int64 counts are only trusted once this passes. Every
  // other count (active, per layer, per stage) is at most this one.
  const double params = total_params_as<double>(model);
  if (params > kMaxModelParams)
    return make_error(fmt::format("{}: the shapes give {:.3g} parameters, more than Loom's limit of {:.3g} ({})", what,
                                  params, kMaxModelParams, kMaxModelParamsReason));
  return {};
}

double ModelSpec::moe_layer_fraction() const { return layers > 0 ? static_cast<double>(moe_layers()) / layers : 0.0; }

double ModelSpec::mean_mlp_ffn() const {
  const double f = moe_layer_fraction();
  const double moe_ffn = static_cast<double>(moe.experts_per_token) * moe.expert_ffn + moe.shared_ffn;
  return (1.0 - f) * ffn_hidden + f * moe_ffn;
}

namespace {
// Forward matmul FLOPs of a layer for `tokens` tokens whose MLP is an MoE layer's in `moe_share` of the cases:
// every weight of its linear layers takes part in one multiply-add per token, except the experts a token is
// not routed to (2 FLOPs per active weight per token). Biases, norms and sinks are not matmul weights.
double linear_flops_fwd(const ModelSpec& m, double tokens, double moe_share) {
  const double h = m.hidden;
  const bool gated = m.activation == Activation::kSwiGLU;
  const MoeSpec& moe = m.moe;
  const double attention =
      static_cast<double>(m.attention_params()) - (m.attention_sinks ? m.heads : 0) -
      static_cast<double>(m.qk_norm_params()) -
      (m.mla.active() ? m.mla.kv_lora_rank + m.mla.q_lora_rank
                      : (m.linear_bias || m.qkv_bias ? m.q_dim() + 2.0 * m.kv_dim() : 0.0) + (m.linear_bias ? h : 0.0));
  const double dense_mlp = (gated ? 3.0 : 2.0) * h * m.ffn_hidden;
  double moe_mlp = 0;
  if (moe.active())
    moe_mlp = h * moe.experts +
              (gated ? 3.0 : 2.0) * h * (static_cast<double>(moe.experts_per_token) * moe.expert_ffn + moe.shared_ffn) +
              (moe.shared_gate ? h : 0.0);
  return 2.0 * tokens * (attention + (1.0 - moe_share) * dense_mlp + moe_share * moe_mlp);
}

// QK^T and softmax·V for `tokens` queries against `keys` keys each: 2 matmuls per head, 2 FLOPs per MAC, over
// q_dim, or under MLA the mean of its Q·K (nope + rope) and V head widths.
double score_flops(const ModelSpec& m, double tokens, double keys) {
  const MlaSpec& a = m.mla;
  const double width = a.active() ? m.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) / 2.0
                                  : static_cast<double>(m.q_dim());
  return 2.0 * 2.0 * tokens * keys * width;
}
}  // namespace

double ModelSpec::layer_linear_flops_fwd(double tokens) const {
  return linear_flops_fwd(*this, tokens, moe_layer_fraction());
}

std::int64_t ModelSpec::mtp_params() const {
  // eh_proj: ColumnParallelLinear(2h, h) without a bias; enorm, hnorm and the final norm.
  return layer_params(layers - 1) + 2LL * hidden * hidden + 3 * norm_params();
}

double ModelSpec::mtp_flops_fwd(double tokens, int seq, int padded) const {
  if (mtp_layers <= 0) return 0.0;
  const double h = hidden;
  return mtp_layers *
         (mtp_layer_flops_fwd(tokens, seq) + 2.0 * tokens * 2.0 * h * h + lm_head_flops_fwd(tokens, padded));
}

double ModelSpec::mtp_attention_flops_fwd(double tokens, int seq) const { return score_flops(*this, tokens, seq); }

double ModelSpec::mtp_layer_flops_fwd(double tokens, int seq) const {
  return linear_flops_fwd(*this, tokens, mtp_layer_moe() ? 1.0 : 0.0) + mtp_attention_flops_fwd(tokens, seq);
}

double ModelSpec::layer_attention_flops_fwd(double tokens, int seq) const {
  // QK^T and softmax·V: 2 matmuls of (s × d) by (d × s) per head, 2 FLOPs per MAC, full (unmasked)
  // square as Megatron counts it (Narayanan et al. 2021, eq. 3); a windowed layer's queries against the
  // window's keys alone. MLA: Q·K over nope + rope dims, P·V over v.
  return score_flops(*this, tokens, attended_keys(seq));
}

namespace {
// The mean over a model's layers of a figure that is `full` for a full-attention layer, `windowed` for a
// sliding-window one and `chunked` for a chunked one.
double mean_over_layers(const ModelSpec& m, double full, double windowed, double chunked) {
  return ((m.layers - m.sliding_layers - m.chunked_layers) * full + m.sliding_layers * windowed +
          m.chunked_layers * chunked) /
         m.layers;
}

// n·c² + r² for n whole chunks of c tokens and a last one of r: the unmasked scores of a chunked layer at
// sequence length s (s² where the chunk holds the sequence).
double chunk_squares(const ModelSpec& m, int seq) {
  const double s = seq;
  if (m.attention_chunk <= 0 || m.attention_chunk >= seq) return s * s;
  const double c = m.attention_chunk, n = seq / m.attention_chunk, r = seq % m.attention_chunk;
  return n * c * c + r * r;
}
}  // namespace

double ModelSpec::attended_keys(int seq) const {
  if (!local_at(seq)) return seq;
  const double s = seq;
  return mean_over_layers(*this, s, std::min<double>(sliding_window, s), chunk_squares(*this, seq) / s);
}

double ModelSpec::causal_square_fraction(int seq) const {
  if (!local_at(seq)) return 0.5;
  const double s = seq, w = std::min<double>(sliding_window, s);
  return mean_over_layers(*this, 0.5, (w * s - 0.5 * w * w) / (s * s), chunk_squares(*this, seq) / (2.0 * s * s));
}

double ModelSpec::lm_head_flops_fwd(double tokens, int padded) const {
  return 2.0 * tokens * static_cast<double>(hidden) * padded;
}

int padded_vocab(int vocab, int tp) {
  const int multiple = 128 * tp;
  return ((vocab + multiple - 1) / multiple) * multiple;
}

}  // namespace loom
