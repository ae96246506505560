#include "core/hf_config.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "core/json_fields.h"

namespace loom {

bool looks_like_hf_config(const Json& json) {
  return json.is_object() &&
         (json.contains("model_type") || json.contains("architectures") || json.contains("n_embd") ||
          json.contains("num_hidden_layers") || json.contains("text_config"));
}

namespace {

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

// The first of `keys` the config sets (not null); else the first, so a missing field is named as most configs name it.
const char* pick(const Json& json, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (json.contains(k) && !json[k].is_null()) return k;
  return *keys.begin();
}

// Falcon's configs say "falcon"; the original Falcon-7B/40B releases say RefinedWebModel/RefinedWeb.
bool is_falcon(const std::string& type) { return is_one_of(type, {"falcon", "RefinedWeb", "RefinedWebModel"}); }

// Families whose MLP is an up and a down projection with no gate.
bool plain_mlp(const std::string& type) {
  return is_falcon(type) ||
         is_one_of(type, {"gpt2", "gpt_bigcode", "gpt_neox", "gptj", "phi", "opt", "starcoder2", "gpt_neo"});
}

// Activation names as Hugging Face spells them (transformers/activations.py, ACT2CLS). A plain MLP has GELU's
// shape whatever its activation. A gated MLP (gate, up and down projections) has SwiGLU's shape: Gemma's GeGLU
// (gelu_pytorch_tanh on the gate) is read as Activation::kSwiGLU, which has its three matrices, so parameters
// and matmul FLOPs are exact; Loom has no GeGLU activation yet, so only the elementwise op is approximate.
Result<Activation> activation_named(const char* field, const std::string& act, bool plain) {
  const bool known = is_one_of(
      act, {"silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "gelu_accurate",
            "quick_gelu", "gelu_10", "relu", "relu2", "relu6", "leaky_relu", "tanh", "sigmoid", "mish", "linear"});
  if (!known)
    return make_error(
        fmt::format("{} '{}' is not an activation Loom knows (silu, swish, gelu, gelu_new, gelu_pytorch_tanh, "
                    "gelu_fast, quick_gelu, relu, relu2, ...)",
                    field, act));
  return plain ? Activation::kGelu : Activation::kSwiGLU;
}

// Dropout probabilities in [0, 1]. A null one is a malformed config, not "no dropout".
bool any_dropout(FieldReader& r, const Json& json, std::initializer_list<const char*> keys, double fallback) {
  bool any = false;
  for (const char* k : keys) {
    if (json.contains(k) && json[k].is_null())
      r.fail(fmt::format("{}: '{}' is null; a dropout probability is a number in [0, 1]", r.what(), k));
    any = r.number(k, fallback, 0.0, 1.0) > 0.0 || any;
  }
  return any;
}

// GPT-2 and GPT-BigCode name their fields n_layer/n_embd/n_head/n_positions/n_inner (n_inner null: 4·hidden).
Result<ModelSpec> from_gpt2(const Json& json, const std::string& type, const std::string& name,
                            const std::string& what) {
  FieldReader r(json, what);
  ModelSpec m;
  m.name = name;
  m.layers = static_cast<int>(r.integer("n_layer", std::nullopt, 1, 4096));
  m.hidden = static_cast<int>(r.integer("n_embd", std::nullopt, 1, 1 << 20));
  m.heads = static_cast<int>(r.integer("n_head", std::nullopt, 1, 1 << 20));
  // GPT-BigCode's multi_query (one K/V head shared by all heads) defaults to true (GPTBigCodeConfig).
  m.kv_heads = r.boolean("multi_query", type == "gpt_bigcode") ? 1 : m.heads;
  m.ffn_hidden = static_cast<int>(r.integer("n_inner", 4LL * m.hidden, 1, 1 << 26));
  m.vocab = static_cast<int>(r.integer("vocab_size", std::nullopt, 1, 1 << 24));
  m.seq_len = static_cast<int>(r.integer("n_positions", std::nullopt, 1, 1 << 24));
  m.seq_len_source = "config.json n_positions";
  m.tied_embeddings = r.boolean("tie_word_embeddings", true);
  const std::string act = r.string("activation_function", std::string("gelu_new"));
  m.dropout = any_dropout(r, json, {"resid_pdrop", "attn_pdrop", "embd_pdrop"}, 0.1);
  if (!r.ok()) return make_error(r.error());
  auto activation = activation_named("activation_function", act, true);
  if (!activation) return make_error(fmt::format("{}: {}", what, activation.error().message));
  m.activation = *activation;
  m.norm = Norm::kLayerNorm;
  m.position = PositionEmbedding::kLearned;
  m.linear_bias = true;
  if (m.hidden % m.heads != 0)
    return make_error(fmt::format("{}: n_embd {} is not divisible by n_head {}", what, m.hidden, m.heads));
  if (Status size = check_model_size(m, what); !size) return size.error();
  return m;
}

// Multi-query and grouped-query attention under each family's field names.
int read_kv_heads(FieldReader& r, const Json& json, const std::string& type, int heads) {
  const char* key = pick(json, {"num_key_value_heads", "num_kv_heads", "n_head_kv"});
  if (is_falcon(type)) {
    // FalconAttention: the new decoder architecture (Falcon-40B/180B) has num_kv_heads K/V heads; the older one
    // has one when multi_query (FalconConfig's default, true), else one per head. RefinedWeb is the former.
    if (r.boolean("new_decoder_architecture", type == "RefinedWeb"))
      return static_cast<int>(r.integer(key, heads, 1, 1 << 20));
    return r.boolean("multi_query", true) ? 1 : heads;
  }
  if (r.boolean("multi_query", false)) return 1;
  return static_cast<int>(r.integer(key, heads, 1, 1 << 20));
}

// The context the model was pretrained at. Llama 3.1 states max_position_embeddings 131072, reached by RoPE
// scaling after pretraining at rope_scaling.original_max_position_embeddings (8192): plan for the latter.
// FalconConfig's max_position_embeddings defaults to 2048, and Falcon-7B's config does not state it.
void read_seq_len(FieldReader& r, const Json& json, bool falcon, ModelSpec& m) {
  if (json.contains("rope_scaling") && !json["rope_scaling"].is_null()) {
    FieldReader rope(json["rope_scaling"], r.what() + " rope_scaling");
    const auto original = rope.integer("original_max_position_embeddings", 0, 0, 1 << 24);
    if (!rope.ok()) r.fail(rope.error());
    if (original > 0) {
      m.seq_len = static_cast<int>(original);
      m.seq_len_source = "config.json rope_scaling.original_max_position_embeddings, the pretraining context";
      return;
    }
  }
  const char* key = pick(json, {"max_position_embeddings", "n_positions", "seq_length"});
  const bool stated = json.contains(key) && !json[key].is_null();
  m.seq_len = static_cast<int>(falcon ? r.integer(key, 2048, 1, 1 << 24) : r.integer(key, std::nullopt, 1, 1 << 24));
  m.seq_len_source = stated ? fmt::format("config.json {}", key) : "FalconConfig's default max_position_embeddings";
}

// The fields that shape each layer's linear layers, norms and embeddings, per family.
void read_family_traits(FieldReader& r, const Json& json, const std::string& type, ModelSpec& m) {
  const bool falcon = is_falcon(type);
  // Gemma ties its LM head to the embedding by default (GemmaConfig); Falcon too (FalconConfig).
  const bool tied_default = falcon || type.rfind("gemma", 0) == 0;
  m.tied_embeddings = r.boolean("tie_word_embeddings", tied_default);
  // GPT-NeoX and Phi have biases on every linear layer, Qwen2 and Qwen2-MoE on q/k/v only; Falcon says `bias`.
  // A stated attention_bias (Llama, gpt-oss: q, k, v and o) is counted on the dense MLP too.
  // ERNIE 4.5 says `use_bias` (Ernie4_5Config: every linear layer).
  const bool stated = falcon ? r.boolean("bias", false)
                             : r.boolean("attention_bias", false) || r.boolean("mlp_bias", false) ||
                                   (type.rfind("ernie4_5", 0) == 0 && r.boolean("use_bias", false));
  m.linear_bias = stated || is_one_of(type, {"gpt_neox", "phi"});
  m.qkv_bias = !m.linear_bias && is_one_of(type, {"qwen2", "qwen2_moe"});
  m.attention_sinks = type == "gpt_oss";  // GptOssAttention.sinks: one per head
  // QK-norm as each family's attention builds it: Qwen3Attention's, Gemma3Attention's, Exaone4Attention's and
  // (with use_qk_norm) Glm4MoeAttention's q_norm / k_norm over head_dim; Olmo2Attention's (OLMo 3's, OLMoE's)
  // over all of Q's and K's width. Llama 4's use_qk_norm (a weightless L2 norm on its RoPE layers only) is not
  // modelled.
  if (is_one_of(type, {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "exaone4"}) ||
      (type == "glm4_moe" && r.boolean("use_qk_norm", false)))
    m.qk_norm = QkNorm::kPerHead;
  else if (is_one_of(type, {"olmo2", "olmo3", "olmoe"}))
    m.qk_norm = QkNorm::kFullWidth;
  m.norm = falcon || is_one_of(type, {"gpt_neox", "opt", "phi"}) ? Norm::kLayerNorm : Norm::kRMSNorm;
  // Falcon with `alibi` has no rotary embedding; neither has parameters, so kRotary stands for both.
  m.position = PositionEmbedding::kRotary;
  m.dropout = any_dropout(
      r, json,
      {"attention_dropout", "hidden_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob", "resid_pdrop"},
      0.0);
}

// An integer field that may be absent or null (then `fallback`).
long long optional_integer(FieldReader& r, const Json& json, const char* key, long long fallback, long long max) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  return r.integer(key, fallback, 0, max);
}

// The fields that count a layer's routed experts, per family: Mixtral, gpt-oss, Llama 4 (num_local_experts),
// Qwen-MoE (num_experts), DeepSeek (n_routed_experts), ERNIE 4.5 (moe_num_experts).
constexpr std::initializer_list<const char*> kExpertCountKeys = {"num_local_experts", "num_experts", "n_routed_experts",
                                                                 "moe_num_experts"};

// A config that describes experts in fields none of the families above uses (a family Loom does not read yet)
// would be read as a dense model, its experts lost: refuse it, naming the field.
void refuse_unread_experts(FieldReader& r, const Json& json) {
  if (!r.ok()) return;
  for (const char* k : kExpertCountKeys)
    if (json.contains(k) && !json[k].is_null()) return;
  for (const auto& [key, value] : json.items()) {
    std::string lower = key;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool names_experts = lower.find("expert") != std::string::npos;
    const bool positive = (value.is_number() && value.get<double>() > 0) || (value.is_array() && !value.empty());
    if (names_experts && positive) {
      r.fail(
          fmt::format("{}: '{}' describes experts in a field Loom does not read (it reads their count from "
                      "num_local_experts, num_experts, n_routed_experts or moe_num_experts)",
                      r.what(), key));
      return;
    }
  }
}

// Decoders whose layers are not all attention (linear attention, state-space or recurrent blocks): Loom's
// cost and memory models know attention and MLP/MoE layers only, so such a config is refused, naming what
// gave it away, rather than read as attention everywhere.
void refuse_non_attention_layers(FieldReader& r, const Json& json, const std::string& type) {
  if (!r.ok()) return;
  static const std::initializer_list<const char*> families = {
      "qwen3_next", "jamba", "mamba",      "mamba2",           "falcon_mamba", "falcon_h1", "zamba",
      "zamba2",     "bamba", "nemotron_h", "granitemoehybrid", "minimax",      "rwkv",      "recurrent_gemma"};
  if (is_one_of(type, families)) {
    r.fail(
        fmt::format("{}: model_type '{}' mixes attention with linear-attention, state-space or recurrent "
                    "layers, which Loom does not model (it plans attention decoders)",
                    r.what(), type));
    return;
  }
  // Fields that describe such layers in these families' configs (Qwen3-Next, Jamba, Nemotron-H, MiniMax,
  // RecurrentGemma, Mamba).
  static const std::initializer_list<const char*> fields = {"full_attention_interval",
                                                            "linear_num_key_heads",
                                                            "linear_conv_kernel_dim",
                                                            "attn_type_list",
                                                            "hybrid_override_pattern",
                                                            "attn_layer_period",
                                                            "block_types",
                                                            "layers_block_type"};
  for (const auto& [key, value] : json.items()) {
    const bool ssm = key.rfind("mamba_", 0) == 0 || key.rfind("ssm_", 0) == 0;
    if (ssm || is_one_of(key, fields)) {
      r.fail(
          fmt::format("{}: '{}' describes linear-attention, state-space or recurrent layers, which Loom does "
                      "not model (it plans attention decoders)",
                      r.what(), key));
      return;
    }
  }
}

// Which layers are MoE, as each family states it, in Loom's pattern (MoeSpec: from first_dense_layers on,
// every layer_freq-th): DeepSeek-V2/V3 make layer i sparse when i ≥ first_k_dense_replace and
// i % moe_layer_freq == 0 (DeepseekV2DecoderLayer), so the first is first_k_dense_replace rounded up to a
// multiple of the frequency; Qwen2/3-MoE when (i + 1) % decoder_sparse_step == 0 (Qwen2MoeDecoderLayer) and
// Llama 4 at range(step − 1, layers, step) for interleave_moe_layer_step (Llama4TextConfig.moe_layers), both
// from layer step − 1 on. A config that lists its MoE layers (Llama 4's moe_layers) must list that pattern.
void read_moe_layers(FieldReader& r, const Json& json, ModelSpec& m) {
  MoeSpec& e = m.moe;
  if (json.contains("moe_layer_start_index") || json.contains("moe_layer_interval") ||
      json.contains("moe_layer_end_index")) {
    // ERNIE 4.5 (Ernie4_5_MoeDecoderLayer): layer i is sparse when (i + 1) % moe_layer_interval == 0 and
    // moe_layer_start_index ≤ i ≤ moe_layer_end_index (−1, the default: the last layer).
    const long long interval = std::max(1LL, optional_integer(r, json, "moe_layer_interval", 1, m.layers));
    const long long start = optional_integer(r, json, "moe_layer_start_index", 0, m.layers);
    long long end = m.layers - 1;
    if (json.contains("moe_layer_end_index") && !json["moe_layer_end_index"].is_null())
      end = r.integer("moe_layer_end_index", std::nullopt, -1, m.layers - 1);
    if (end == -1) end = m.layers - 1;
    const long long first =
        (start + interval) / interval * interval - 1;  // the first i ≥ start with (i + 1) % interval == 0
    e.layer_freq = static_cast<int>(interval);
    e.first_dense_layers = static_cast<int>(std::min<long long>(first, m.layers));
    // Loom's pattern runs to the last layer: dense layers after the last MoE one are not expressible.
    const long long last_moe = first + (m.layers - 1 - first) / interval * interval;
    if (r.ok() && first < m.layers && end < last_moe)
      r.fail(
          fmt::format("{}: 'moe_layer_end_index' {} leaves dense layers after the MoE ones (up to layer {}): "
                      "Loom models MoE layers at one interval to the last layer only",
                      r.what(), end, last_moe));
    return;
  }
  const char* step_key = pick(json, {"moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step"});
  const long long step = std::max(1LL, optional_integer(r, json, step_key, 1, m.layers));
  const long long first_k = optional_integer(r, json, "first_k_dense_replace", 0, m.layers);
  e.layer_freq = static_cast<int>(step);
  const long long first = std::string(step_key) == "moe_layer_freq" ? (first_k + step - 1) / step * step : step - 1;
  e.first_dense_layers = static_cast<int>(std::min<long long>(std::max(first, first_k), m.layers));
  if (json.contains("moe_layers") && !json["moe_layers"].is_null()) {
    const Json& listed = json["moe_layers"];
    std::vector<long long> want;
    for (int l = 0; l < m.layers; ++l)
      if (m.is_moe_layer(l)) want.push_back(l);
    bool same = listed.is_array() && listed.size() == want.size();
    for (std::size_t i = 0; same && i < want.size(); ++i)
      same = listed[i].is_number_integer() && listed[i].get<long long>() == want[i];
    if (!same)
      r.fail(
          fmt::format("{}: 'moe_layers' {} are not the layers from {} at a step of {} "
                      "(interleave_moe_layer_step): Loom models MoE layers at one interval only",
                      r.what(), listed.dump(), e.first_dense_layers, e.layer_freq));
  }
  // Qwen's mlp_only_layers: dense layers among MoE ones.
  if (json.contains("mlp_only_layers") && json["mlp_only_layers"].is_array() && !json["mlp_only_layers"].empty())
    r.fail(fmt::format("{}: 'mlp_only_layers' (dense layers among MoE ones) is not supported yet", r.what()));
}

// Mixture-of-experts fields under each family's names (transformers' Mixtral/Qwen2-MoE/Qwen3-MoE/
// DeepSeek-V2/V3/gpt-oss/Llama 4 configs). Where every layer is MoE the config's intermediate_size is the
// expert's.
void read_moe(FieldReader& r, const Json& json, const std::string& type, ModelSpec& m) {
  const char* experts_key = pick(json, kExpertCountKeys);
  const long long experts = optional_integer(r, json, experts_key, 0, 1 << 16);
  if (experts <= 0) return;
  MoeSpec& e = m.moe;
  e.experts = static_cast<int>(experts);
  e.experts_per_token = static_cast<int>(
      r.integer(pick(json, {"num_experts_per_tok", "experts_per_token", "moe_k"}), std::nullopt, 1, experts));
  e.expert_ffn = static_cast<int>(optional_integer(r, json, "moe_intermediate_size", m.ffn_hidden, 1 << 26));
  if (type.rfind("llama4", 0) == 0) {
    // Llama4TextMoe: routed experts and one shared expert (Llama4TextMLP, ungated, added to their sum),
    // both intermediate_size wide; the dense layers' Llama4TextMLP is intermediate_size_mlp wide.
    e.shared_ffn = e.expert_ffn;
    m.ffn_hidden = static_cast<int>(optional_integer(r, json, "intermediate_size_mlp", m.ffn_hidden, 1 << 26));
  } else if (const long long shared = optional_integer(r, json, "shared_expert_intermediate_size", 0, 1 << 26);
             shared > 0) {
    e.shared_ffn = static_cast<int>(shared);  // Qwen2-MoE: one shared expert behind a sigmoid gate
    e.shared_gate = true;
  } else {
    // DeepSeek's n_shared_experts, ERNIE 4.5's moe_num_shared_experts: gated MLPs moe_intermediate_size wide
    // (one MLP n times as wide, Ernie4_5_MoeSparseMoeBlock.shared_experts).
    const char* shared_key = pick(json, {"n_shared_experts", "moe_num_shared_experts"});
    const long long shared_ffn = optional_integer(r, json, shared_key, 0, 1 << 10) * e.expert_ffn;
    if (shared_ffn > (1 << 26))
      r.fail(fmt::format("{}: {} · moe_intermediate_size = {} is wider than any MLP ({} at most)", r.what(), shared_key,
                         shared_ffn, 1 << 26));
    else
      e.shared_ffn = static_cast<int>(shared_ffn);
  }
  read_moe_layers(r, json, m);
  e.expert_bias = type == "gpt_oss";  // GptOssExperts: gate_up and down biases; GptOssTopKRouter: a bias
}

// Sliding-window attention under each family's fields (transformers' configs and modeling code):
// - an explicit per-layer `layer_types` ("sliding_attention" / "full_attention"): gpt-oss, and every
//   config transformers 4.53+ writes;
// - Gemma 2: every other layer from the first (Gemma2Attention: sliding when layer_idx % 2 == 0);
// - a `sliding_window_pattern` p (Gemma 3, default 6; Cohere 2): all but every p-th layer
//   (sliding when (layer_idx + 1) % p != 0);
// - the Qwen2 family: only with use_sliding_window, on the layers from max_window_layers on;
// - any other config's non-null sliding_window: every layer (Mistral 7B v0.1, Phi-3, Starcoder2).
// Gemma 2's and 3's window defaults to their config classes' 4096 when the file leaves it out.
void read_sliding_window(FieldReader& r, const Json& json, const std::string& type, ModelSpec& m) {
  if (!r.ok()) return;  // the layer count may not have been read (a failed field reads as 0)
  const bool gemma2 = type.rfind("gemma2", 0) == 0, gemma3 = type.rfind("gemma3", 0) == 0, gemma = gemma2 || gemma3;
  const bool qwen = type.rfind("qwen", 0) == 0;
  if (qwen && !r.boolean("use_sliding_window", false)) return;
  const bool listed = json.contains("layer_types") && !json["layer_types"].is_null();
  if (!listed && !gemma && !r.has("sliding_window")) return;
  int sliding = 0;
  if (listed) {
    const Json& types = json["layer_types"];
    if (!types.is_array() || types.size() != static_cast<std::size_t>(m.layers)) {
      r.fail(fmt::format("{}: 'layer_types' must list the {} layers' attention", r.what(), m.layers));
      return;
    }
    for (const Json& t : types) {
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name == "sliding_attention") {
        ++sliding;
      } else if (name != "full_attention" && name != "chunked_attention") {  // chunks: read_attention_chunks
        r.fail(fmt::format(
            "{}: layer type '{}' is not one Loom models (sliding_attention, chunked_attention or full_attention)",
            r.what(), name));
        return;
      }
    }
  } else if (gemma2) {
    sliding = (m.layers + 1) / 2;
  } else if (gemma3 || r.has("sliding_window_pattern")) {
    const long long pattern = r.integer("sliding_window_pattern", 6, 1, 1 << 20);
    if (!r.ok()) return;
    sliding = m.layers - static_cast<int>(m.layers / pattern);
  } else if (qwen) {
    sliding = std::max(0, m.layers - static_cast<int>(r.integer("max_window_layers", 28, 0, 1 << 20)));
  } else {
    sliding = m.layers;
  }
  if (sliding == 0) return;
  m.sliding_window =
      static_cast<int>(r.integer("sliding_window", gemma ? std::optional<long long>(4096) : std::nullopt, 1, 1 << 30));
  m.sliding_layers = sliding;
}

// Llama 4's chunked attention (Llama4TextConfig): the layers that apply RoPE attend within chunks of
// attention_chunk_size tokens (default 8192), the others (every no_rope_layer_interval-th, default 4) to the
// whole sequence; no_rope_layers lists them (1: RoPE and chunked), and configs transformers 4.53+ writes say
// "chunked_attention" in layer_types. Other families state chunks in layer_types alone.
void read_attention_chunks(FieldReader& r, const Json& json, const std::string& type, ModelSpec& m) {
  if (!r.ok()) return;
  const bool llama4 = type.rfind("llama4", 0) == 0;
  int chunked = 0;
  if (json.contains("layer_types") && json["layer_types"].is_array()) {
    for (const Json& t : json["layer_types"]) chunked += t.is_string() && t.get<std::string>() == "chunked_attention";
  } else if (llama4 && json.contains("no_rope_layers") && !json["no_rope_layers"].is_null() &&
             !(json["no_rope_layers"].is_array() && json["no_rope_layers"].empty())) {
    const Json& listed = json["no_rope_layers"];
    if (!listed.is_array() || listed.size() != static_cast<std::size_t>(m.layers)) {
      r.fail(fmt::format("{}: 'no_rope_layers' must hold one 0 or 1 for each of the {} layers", r.what(), m.layers));
      return;
    }
    for (const Json& v : listed) chunked += v.is_number_integer() && v.get<long long>() != 0;
  } else if (llama4) {
    const long long interval = r.integer("no_rope_layer_interval", 4, 1, 1 << 20);
    chunked = m.layers - static_cast<int>(m.layers / std::max(1LL, interval));
  }
  if (chunked == 0) return;
  if (m.sliding_layers + chunked > m.layers) {
    r.fail(fmt::format("{}: {} sliding-window and {} chunked layers are more than the {} layers", r.what(),
                       m.sliding_layers, chunked, m.layers));
    return;
  }
  m.attention_chunk = static_cast<int>(
      r.integer("attention_chunk_size", llama4 ? std::optional<long long>(8192) : std::nullopt, 1, 1 << 30));
  m.chunked_layers = chunked;
}

// DeepSeek's multi-head latent attention (DeepseekV2Attention): present when kv_lora_rank is set.
void read_mla(FieldReader& r, const Json& json, ModelSpec& m) {
  if (!json.contains("kv_lora_rank") || json["kv_lora_rank"].is_null()) return;
  MlaSpec& a = m.mla;
  a.kv_lora_rank = static_cast<int>(r.integer("kv_lora_rank", std::nullopt, 1, 1 << 20));
  a.q_lora_rank = static_cast<int>(optional_integer(r, json, "q_lora_rank", 0, 1 << 20));
  a.qk_nope_head_dim = static_cast<int>(r.integer("qk_nope_head_dim", std::nullopt, 1, 1 << 16));
  a.qk_rope_head_dim = static_cast<int>(r.integer("qk_rope_head_dim", std::nullopt, 1, 1 << 16));
  a.v_head_dim = static_cast<int>(r.integer("v_head_dim", std::nullopt, 1, 1 << 16));
  m.kv_heads = m.heads;  // every head has its own K and V, rebuilt from the latent
}

// LLaMA, Mistral, Qwen2, Gemma, GPT-NeoX, Phi, Falcon and most recent decoders: hidden_size, num_hidden_layers, ...
// Structure Loom cannot express yet stays approximate: parallel attention + MLP (Falcon, Phi, GPT-NeoX) is
// counted as sequential with two norms per layer (Falcon-7B and Phi-2 have one: 2·hidden parameters a layer too
// many), partial rotary changes no parameter count, and Phi's LM-head bias (vocab parameters) is not counted.
Result<ModelSpec> from_decoder(const Json& json, const std::string& type, const std::string& name,
                               const std::string& what) {
  FieldReader r(json, what);
  const bool falcon = is_falcon(type);
  ModelSpec m;
  m.name = name;
  m.layers = static_cast<int>(r.integer(pick(json, {"num_hidden_layers", "n_layer"}), std::nullopt, 1, 4096));
  m.hidden = static_cast<int>(r.integer("hidden_size", std::nullopt, 1, 1 << 20));
  m.heads = static_cast<int>(r.integer(pick(json, {"num_attention_heads", "n_head"}), std::nullopt, 1, 1 << 20));
  m.kv_heads = read_kv_heads(r, json, type, m.heads);
  // Falcon has no intermediate_size: its MLP is 4·hidden (newer Falcon configs may state ffn_hidden_size).
  const char* ffn_key = pick(json, {"intermediate_size", "ffn_hidden_size"});
  m.ffn_hidden = static_cast<int>(falcon ? r.integer(ffn_key, 4LL * m.hidden, 1, 1 << 26)
                                         : r.integer(ffn_key, std::nullopt, 1, 1 << 26));
  m.vocab = static_cast<int>(r.integer("vocab_size", std::nullopt, 1, 1 << 24));
  read_seq_len(r, json, falcon, m);
  const char* act_field = falcon ? pick(json, {"activation", "hidden_act"})
                                 : pick(json, {"hidden_activation", "hidden_act", "activation_function"});
  const std::string act = r.string(act_field, std::string(falcon ? "gelu" : "silu"));
  // Explicit head_dim (Qwen3, Gemma, Mistral-Nemo, gpt-oss); some configs write it as null.
  const bool has_head_dim = json.contains("head_dim") && !json["head_dim"].is_null();
  const long long head_dim = has_head_dim ? r.integer("head_dim", std::nullopt, 1, 1 << 20) : 0;
  refuse_non_attention_layers(r, json, type);
  read_family_traits(r, json, type, m);
  read_moe(r, json, type, m);
  refuse_unread_experts(r, json);
  read_mla(r, json, m);
  read_sliding_window(r, json, type, m);
  read_attention_chunks(r, json, type, m);
  // DeepSeek-V3's and GLM-4.5's multi-token-prediction modules (their checkpoints hold them as layers past
  // num_hidden_layers).
  m.mtp_layers = static_cast<int>(optional_integer(r, json, "num_nextn_predict_layers", 0, kMaxMtpLayers));
  if (!r.ok()) return make_error(r.error());
  auto activation = activation_named(act_field, act, plain_mlp(type));
  if (!activation) return make_error(fmt::format("{}: {}", what, activation.error().message));
  m.activation = *activation;
  // Stored only where it differs from hidden/heads, so other configs read exactly as before.
  if (has_head_dim && head_dim * m.heads != m.hidden) m.explicit_head_dim = static_cast<int>(head_dim);
  if (m.explicit_head_dim == 0 && m.hidden % m.heads != 0)
    return make_error(
        fmt::format("{}: hidden_size {} is not divisible by num_attention_heads {}", what, m.hidden, m.heads));
  if (m.heads % m.kv_heads != 0)
    return make_error(fmt::format("{}: num_attention_heads {} is not divisible by num_key_value_heads {}", what,
                                  m.heads, m.kv_heads));
  if (Status size = check_model_size(m, what); !size) return size.error();
  return m;
}

Result<ModelSpec> read_text_model(const Json& json, const std::string& name, const std::string& what) {
  FieldReader r(json, what);
  const std::string type = r.string("model_type", std::string());
  if (!r.ok()) return make_error(r.error());
  if (type == "gpt2" || type == "gpt_bigcode" || (json.contains("n_embd") && !json.contains("hidden_size")))
    return from_gpt2(json, type, name, what);
  return from_decoder(json, type, name, what);
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const Json& json, const std::string& fallback_name, const std::string& source) {
  std::string name = fallback_name;
  if (json.contains("_name_or_path") && json["_name_or_path"].is_string() &&
      !json["_name_or_path"].get<std::string>().empty())
    name = json["_name_or_path"].get<std::string>();
  // Multimodal configs (LLaVA, Gemma 3, Mistral 3, ...) hold the language model under text_config; Loom plans
  // the language model (the vision tower is not counted).
  if (json.contains("text_config") && !json["text_config"].is_null()) {
    if (!json["text_config"].is_object()) return make_error(source + ": 'text_config' must be an object");
    return read_text_model(json["text_config"], name, source + " text_config");
  }
  return read_text_model(json, name, source);
}

}  // namespace loom
