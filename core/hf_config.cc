#include "core/hf_config.h"

#include <fmt/format.h>

#include "core/internal/json_fields.h"

namespace loom {

bool looks_like_hf_config(const Json& json) {
  return json.is_object() && (json.contains("model_type") || json.contains("architectures") ||
                              json.contains("n_embd") || json.contains("num_hidden_layers"));
}

namespace {

// GPT-2 names its fields n_layer/n_embd/n_head/n_positions/n_inner.
Result<ModelSpec> from_gpt2(const Json& json, const std::string& name) {
  internal::FieldReader r(json, "config.json (GPT-2)");
  ModelSpec m;
  m.name = name;
  m.layers = static_cast<int>(r.integer("n_layer", std::nullopt, 1, 4096));
  m.hidden = static_cast<int>(r.integer("n_embd", std::nullopt, 1, 1 << 20));
  m.heads = static_cast<int>(r.integer("n_head", std::nullopt, 1, 1 << 20));
  m.kv_heads = m.heads;
  m.ffn_hidden = static_cast<int>(r.integer("n_inner", 4LL * m.hidden, 1, 1 << 26));
  m.vocab = static_cast<int>(r.integer("vocab_size", std::nullopt, 1, 1 << 24));
  m.seq_len = static_cast<int>(r.integer("n_positions", std::nullopt, 1, 1 << 24));
  m.tied_embeddings = r.boolean("tie_word_embeddings", true);
  if (!r.ok()) return make_error(r.error());
  m.activation = Activation::kGelu;
  m.norm = Norm::kLayerNorm;
  m.position = PositionEmbedding::kLearned;
  m.linear_bias = true;
  m.dropout = r.number("resid_pdrop", 0.1, 0.0, 1.0) > 0.0;
  return m;
}

// LLaMA, Mistral, Qwen2 and most recent decoders: hidden_size, num_hidden_layers, ...
Result<ModelSpec> from_llama(const Json& json, const std::string& name) {
  internal::FieldReader r(json, "config.json");
  ModelSpec m;
  m.name = name;
  m.layers = static_cast<int>(r.integer("num_hidden_layers", std::nullopt, 1, 4096));
  m.hidden = static_cast<int>(r.integer("hidden_size", std::nullopt, 1, 1 << 20));
  m.heads = static_cast<int>(r.integer("num_attention_heads", std::nullopt, 1, 1 << 20));
  m.kv_heads = static_cast<int>(r.integer("num_key_value_heads", m.heads, 1, 1 << 20));
  m.ffn_hidden = static_cast<int>(r.integer("intermediate_size", std::nullopt, 1, 1 << 26));
  m.vocab = static_cast<int>(r.integer("vocab_size", std::nullopt, 1, 1 << 24));
  m.seq_len = static_cast<int>(r.integer("max_position_embeddings", std::nullopt, 1, 1 << 24));
  m.tied_embeddings = r.boolean("tie_word_embeddings", false);
  const std::string act = r.string("hidden_act", std::string("silu"));
  const bool bias = r.boolean("attention_bias", false) || r.boolean("mlp_bias", false);
  if (!r.ok()) return make_error(r.error());
  if (json.contains("head_dim") && json["head_dim"].is_number_integer() &&
      json["head_dim"].get<long long>() * m.heads != m.hidden)
    return make_error("config.json: head_dim · num_attention_heads != hidden_size is not supported");
  m.activation = (act == "silu" || act == "swish") ? Activation::kSwiGLU : Activation::kGelu;
  const std::string type = json.value("model_type", std::string());
  m.norm = type == "gpt_neox" || type == "opt" ? Norm::kLayerNorm : Norm::kRMSNorm;
  m.position = PositionEmbedding::kRotary;
  m.linear_bias = bias || type == "qwen2";
  m.dropout = json.value("attention_dropout", 0.0) > 0.0 || json.value("hidden_dropout", 0.0) > 0.0;
  if (m.hidden % m.heads != 0)
    return make_error(
        fmt::format("config.json: hidden_size {} is not divisible by num_attention_heads {}", m.hidden, m.heads));
  if (m.heads % m.kv_heads != 0)
    return make_error(fmt::format("config.json: num_attention_heads {} is not divisible by num_key_value_heads {}",
                                  m.heads, m.kv_heads));
  return m;
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const Json& json, const std::string& fallback_name) {
  std::string name = fallback_name;
  if (json.contains("_name_or_path") && json["_name_or_path"].is_string() &&
      !json["_name_or_path"].get<std::string>().empty())
    name = json["_name_or_path"].get<std::string>();
  const std::string type = json.value("model_type", std::string());
  if (type == "gpt2" || (json.contains("n_embd") && !json.contains("hidden_size"))) return from_gpt2(json, name);
  return from_llama(json, name);
}

}  // namespace loom
