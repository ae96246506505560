// ModelSpec: the shape of a decoder-only transformer (GPT, LLaMA, Mistral families) and the
// parameter and FLOP counts derived from it. Every other component reads model shapes from here.
#pragma once

#include <cstdint>
#include <string>

#include "core/names.h"

namespace loom {

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;    // == heads for multi-head attention; fewer for GQA/MQA
  int ffn_hidden = 0;  // MLP inner width (4·hidden for GPT; 2/3·4h rounded for SwiGLU models)
  int vocab = 0;
  int seq_len = 0;  // the model's trained context; the training spec may override
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  PositionEmbedding position = PositionEmbedding::kLearned;
  bool tied_embeddings = true;
  bool linear_bias = true;  // GPT-2/3 have biases on every linear layer; LLaMA has none
  bool dropout = true;      // GPT-3/Megatron train with dropout (its masks are activations); LLaMA does not
  // Width of one attention head when a model states it apart from hidden/heads (Qwen3, Gemma 2/3,
  // Mistral-Nemo, gpt-oss); 0: hidden / heads. Q and the context are heads·head_dim wide then.
  int explicit_head_dim = 0;

  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
  std::int64_t q_dim() const { return static_cast<std::int64_t>(heads) * head_dim(); }
  std::int64_t kv_dim() const { return static_cast<std::int64_t>(kv_heads) * head_dim(); }

  // Parameters of one transformer block (attention + MLP + its two norms).
  std::int64_t attention_params() const;
  std::int64_t mlp_params() const;
  std::int64_t norm_params() const;  // one norm layer
  std::int64_t params_per_layer() const;
  // Token embedding (+ learned positions); LM head when untied; final norm.
  std::int64_t embedding_params(int padded_vocab) const;
  std::int64_t lm_head_params(int padded_vocab) const;
  std::int64_t total_params() const;  // with the unpadded vocabulary, as papers report sizes

  // Forward matmul FLOPs of one layer for `tokens` tokens at sequence length `seq`
  // (2 FLOPs per multiply-add). Attention scores and context (QK^T, AV) are counted separately.
  double layer_linear_flops_fwd(double tokens) const;
  double layer_attention_flops_fwd(double tokens, int seq) const;
  double lm_head_flops_fwd(double tokens, int padded_vocab) const;
};

// Megatron pads the vocabulary so every TP rank holds an equal slice that is a multiple of 128
// (--make-vocab-size-divisible-by 128).
int padded_vocab(int vocab, int tp);

}  // namespace loom
