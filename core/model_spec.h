// ModelSpec: the shape of a decoder-only transformer (GPT, LLaMA, Mistral families) and the
// parameter and FLOP counts derived from it. Every other component reads model shapes from here.
#pragma once

#include <cstdint>
#include <string>

#include "core/names.h"
#include "core/result.h"

namespace loom {

// Mixture of experts (Mixtral, Qwen-MoE, DeepSeek V2/V3, gpt-oss): in an MoE layer a router sends each
// token to `experts_per_token` of `experts` routed experts (each a gated MLP `expert_ffn` wide) and to the
// always-active shared expert(s), `shared_ffn` wide in all.
struct MoeSpec {
  int experts = 0;             // routed experts per MoE layer; 0: every layer has the dense MLP
  int experts_per_token = 0;   // top-k routing
  int expert_ffn = 0;          // inner width of one routed expert
  int shared_ffn = 0;          // inner width of the shared expert(s) together; 0: none
  bool shared_gate = false;    // Qwen2-MoE: a sigmoid gate (hidden weights) scales the shared expert's output
  int first_dense_layers = 0;  // leading layers that keep the dense MLP (DeepSeek's first_k_dense_replace)
  int layer_freq = 1;          // after them, every layer_freq-th layer is an MoE layer
  bool expert_bias = false;    // gpt-oss: biases on every expert projection and on the router
  bool active() const { return experts > 0; }
  bool operator==(const MoeSpec&) const = default;
};

// Multi-head latent attention (DeepSeek V2/V3): K and V are rebuilt per head from a shared latent of
// kv_lora_rank values; Q optionally through its own latent. Head widths differ for Q·K and V.
struct MlaSpec {
  int q_lora_rank = 0;  // 0: Q projected from the hidden state directly
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool active() const { return kv_lora_rank > 0; }
  bool operator==(const MlaSpec&) const = default;
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;    // == heads for multi-head attention; fewer for GQA/MQA
  int ffn_hidden = 0;  // MLP inner width (4·hidden for GPT; 2/3·4h rounded for SwiGLU models)
  int vocab = 0;
  int seq_len = 0;                        // the model's trained context; the training spec may override
  std::string seq_len_source = "preset";  // where seq_len was read (a config field), for the plan's # lines
  // A checkpoint directory's weights against this count (core/checkpoint_params.h), for the plan's #
  // lines; empty when the model was not read from a directory holding weights.
  std::string checkpoint_note;
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  PositionEmbedding position = PositionEmbedding::kLearned;
  bool tied_embeddings = true;
  bool linear_bias = true;  // GPT-2/3 have biases on every linear layer; LLaMA has none
  bool dropout = true;      // GPT-3/Megatron train with dropout (its masks are activations); LLaMA does not
  // Width of one attention head when a model states it apart from hidden/heads (Qwen3, Gemma 2/3,
  // Mistral-Nemo, gpt-oss); 0: hidden / heads. Q and the context are heads·head_dim wide then.
  int explicit_head_dim = 0;
  bool qkv_bias = false;           // biases on Q, K and V only (the Qwen2 family), when linear_bias is false
  bool attention_sinks = false;    // gpt-oss: one learned softmax sink per head
  QkNorm qk_norm = QkNorm::kNone;  // core/names.h QkNorm (not with MLA)
  // Sliding-window attention (Mistral 7B v0.1, Gemma 2/3, gpt-oss): `sliding_layers` of the layers let a
  // query see only the `sliding_window` most recent keys (itself included); the others attend causally
  // to the whole sequence. Which layers they are does not change a layer's mean cost, so only the count
  // is kept. 0, 0: every layer attends to the whole sequence.
  int sliding_window = 0;
  int sliding_layers = 0;
  // Chunked attention (Llama 4's attention_chunk_size): `chunked_layers` of the layers cut the sequence into
  // chunks of `attention_chunk` tokens, each query attending causally to the keys of its own chunk alone;
  // no layer is both sliding and chunked. 0, 0: none.
  int attention_chunk = 0;
  int chunked_layers = 0;
  MoeSpec moe;
  MlaSpec mla;
  // Multi-token prediction (DeepSeek-V3, GLM-4.5, MiMo: config.json's num_nextn_predict_layers; Megatron-core's
  // --mtp-num-layers): `mtp_layers` modules after the last layer, on the last pipeline stage, the k-th
  // predicting the token k + 1 places on. Each normalises the shifted tokens' embedding and the previous depth's
  // hidden state, concatenates the two and projects them 2h → h (eh_proj), runs one transformer layer of the last
  // layer's kind and a final norm, and sends its logits through the shared LM head to a cross-entropy of its own
  // (Megatron-core's MultiTokenPredictionLayer). Not in total_params(), which is the main model's size as papers
  // give it (DeepSeek-V3: 671 B beside its MTP module).
  int mtp_layers = 0;

  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
  std::int64_t q_dim() const { return static_cast<std::int64_t>(heads) * head_dim(); }
  std::int64_t kv_dim() const { return static_cast<std::int64_t>(kv_heads) * head_dim(); }

  // Parameters of one transformer block (attention + MLP or MoE + its two norms).
  std::int64_t attention_params() const;
  std::int64_t mlp_params() const;  // the dense MLP
  // An MoE layer's router, routed experts (all of them, or the experts_per_token a token uses) and shared expert.
  std::int64_t moe_params(bool active_only) const;
  // An MoE layer's routed experts alone (what expert parallelism splits), all of them.
  std::int64_t routed_expert_params() const;
  std::int64_t norm_params() const;     // one norm layer
  std::int64_t qk_norm_params() const;  // one layer's QK-norm weights (in attention_params)
  bool is_moe_layer(int layer) const;
  int moe_layers() const;
  std::int64_t layer_params(int layer, bool active_only = false) const;
  std::int64_t layers_params(bool active_only = false) const;  // all blocks
  std::int64_t active_params() const;                          // what one token uses (the routed experts it goes to)
  // Per token, the mean over the layers: the MLP inner width it passes through (an MoE layer's routed
  // experts, k · expert_ffn, plus its shared expert), the share of layers that are MoE, and the
  // copies of its hidden state an MoE layer dispatches to experts (k; mean over the layers).
  double mean_mlp_ffn() const;
  double moe_layer_fraction() const;
  double mean_dispatched_copies() const { return moe_layer_fraction() * moe.experts_per_token; }
  // Token embedding (+ learned positions); LM head when untied; final norm.
  std::int64_t embedding_params(int padded_vocab) const;
  std::int64_t lm_head_params(int padded_vocab) const;
  std::int64_t total_params() const;  // with the unpadded vocabulary, as papers report sizes

  // Forward matmul FLOPs of one layer for `tokens` tokens at sequence length `seq` (2 FLOPs per
  // multiply-add), the mean over the layers (MoE layers count the experts each token goes to).
  // Attention scores and context (QK^T, AV) are counted separately.
  double layer_linear_flops_fwd(double tokens) const;
  double layer_attention_flops_fwd(double tokens, int seq) const;
  // Whether some layer's window is shorter than `seq` (then its attention differs from a full layer's).
  bool windowed_at(int seq) const { return sliding_layers > 0 && sliding_window < seq; }
  // Whether some layer's chunk is shorter than `seq`; whether either holds (some layer attends locally).
  bool chunked_at(int seq) const { return chunked_layers > 0 && attention_chunk < seq; }
  bool local_at(int seq) const { return windowed_at(seq) || chunked_at(seq); }
  // The mean over the layers of the keys each query is counted against, unmasked, as Megatron counts the
  // full square: seq for a full layer, min(window, seq) for a windowed one, its own chunk's length for a
  // chunked one ((n·c² + r²)/s for n whole chunks of c and a last one of r tokens).
  double attended_keys(int seq) const;
  // The mean over the layers of the share of the seq × seq score square a causal fused kernel computes
  // (it skips masked tiles): 1/2 for a full layer, (w·s − w²/2)/s² for a window w < s, (n·c² + r²)/(2·s²)
  // for chunks.
  double causal_square_fraction(int seq) const;
  double lm_head_flops_fwd(double tokens, int padded_vocab) const;

  // Multi-token prediction: whether its layer is an MoE layer (the last layer's kind, as Megatron-core builds it
  // from the decoder's last layer spec), one module's parameters (its layer, eh_proj's 2h·h, three norms), and
  // the forward matmul FLOPs of all the modules for `tokens` tokens: each module's layer (attending to the whole
  // sequence), eh_proj and its pass through the LM head.
  bool mtp_layer_moe() const { return is_moe_layer(layers - 1); }
  std::int64_t mtp_params() const;
  double mtp_flops_fwd(double tokens, int seq, int padded_vocab) const;
  // One module's transformer layer alone (linear and attention), what recomputation re-runs of it.
  double mtp_layer_flops_fwd(double tokens, int seq) const;
  double mtp_attention_flops_fwd(double tokens, int seq) const;
};

// The most multi-token-prediction modules a model file may ask for: released models have one (DeepSeek-V3,
// GLM-4.5) and the MTP papers try up to four; more is taken for a typo.
inline constexpr int kMaxMtpLayers = 16;

// Megatron pads the vocabulary so every TP rank holds an equal slice that is a multiple of 128
// (--make-vocab-size-divisible-by 128).
int padded_vocab(int vocab, int tp);

// Parameter counts are exact in double up to 2^53, the precision memory and FLOP figures are
// computed in, and 2^53 is over 4,000 times the largest model trained (about 2·10^12); a model
// file beyond it holds a typo, and its counts would not be exact.
inline constexpr double kMaxModelParams = 9007199254740992.0;  // 2^53
inline constexpr const char* kMaxModelParamsReason = "2^53, where counts stop being exact in double";
// Bad input when the model's total parameter count exceeds kMaxModelParams; `what` names the source.
// The readers call this before anything computes the int64 counts, which it keeps from wrapping.
Status check_model_size(const ModelSpec& model, const std::string& what);

}  // namespace loom
