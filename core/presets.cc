#include "core/presets.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "core/checkpoint_params.h"
#include "core/hf_config.h"
#include "core/json_io.h"
#include "profiles/embedded_profiles.h"

namespace loom {

ModelSpec gpt_shape(std::string name, int layers, int hidden, int heads, int vocab, int seq) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = vocab;
  m.seq_len = seq;
  return m;  // GeLU, LayerNorm, learned positions, tied embeddings, biases, dropout
}

ModelSpec llama_shape(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int seq) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn_hidden = ffn;
  m.vocab = vocab;
  m.seq_len = seq;
  m.activation = Activation::kSwiGLU;
  m.norm = Norm::kRMSNorm;
  m.position = PositionEmbedding::kRotary;
  m.tied_embeddings = false;
  m.linear_bias = false;
  m.dropout = false;
  return m;
}

namespace {

// Shapes from the papers and the released config.json files:
//   GPT-3: Brown et al. 2020, Table 2.1 (vocab 50257, context 2048).
//   LLaMA 2: Touvron et al. 2023 and meta-llama/Llama-2-*-hf config.json.
//   LLaMA 3: Llama 3 Herd of Models 2024, Table 3, and meta-llama/Meta-Llama-3*-hf config.json.
//   Megatron 22B/530B/1T: Korthikanti et al. 2022, Table 3 (vocab padded to 51200 there).
const std::map<std::string, std::function<ModelSpec()>>& model_table() {
  static const std::map<std::string, std::function<ModelSpec()>> table = {
      {"gpt-tiny",
       [] {
         // Small enough to train on one CPU core; byte-level vocabulary (loom data prepare); no
         // dropout so every parallel layout computes bit-comparable losses.
         ModelSpec m = gpt_shape("gpt-tiny", 4, 128, 4, 256, 128);
         m.dropout = false;
         return m;
       }},
      {"gpt2-small", [] { return gpt_shape("gpt2-small", 12, 768, 12, 50257, 1024); }},
      {"gpt2-xl", [] { return gpt_shape("gpt2-xl", 48, 1600, 25, 50257, 1024); }},
      {"gpt3-175b", [] { return gpt_shape("gpt3-175b", 96, 12288, 96, 50257, 2048); }},
      {"megatron-22b", [] { return gpt_shape("megatron-22b", 48, 6144, 64, 51200, 2048); }},
      {"megatron-175b", [] { return gpt_shape("megatron-175b", 96, 12288, 96, 51200, 2048); }},
      {"megatron-530b", [] { return gpt_shape("megatron-530b", 105, 20480, 128, 51200, 2048); }},
      {"megatron-1t", [] { return gpt_shape("megatron-1t", 128, 25600, 160, 51200, 2048); }},
      {"llama2-7b", [] { return llama_shape("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096); }},
      {"llama2-13b", [] { return llama_shape("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096); }},
      {"llama2-70b", [] { return llama_shape("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096); }},
      {"llama3-8b", [] { return llama_shape("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192); }},
      {"llama3-70b", [] { return llama_shape("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192); }},
      {"llama3-405b", [] { return llama_shape("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192); }},
      {"mistral-7b", [] { return llama_shape("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 8192); }},
  };
  return table;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_preset_message(const char* kind, const std::string& name, const std::vector<std::string>& names) {
  const std::string hint = nearest_name(name, names);
  if (!hint.empty()) return fmt::format("unknown {} '{}' (did you mean '{}'?)", kind, name, hint);
  return fmt::format("unknown {} '{}' (presets: {}; or give a JSON file)", kind, name, fmt::join(names, ", "));
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".json") || std::filesystem::exists(s);
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : model_table()) names.push_back(name);
  return names;
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : embedded_profiles()) names.push_back(name);
  return names;
}

Result<ModelSpec> model_preset(const std::string& name) {
  const auto& table = model_table();
  auto it = table.find(name);
  if (it == table.end()) return make_error(unknown_preset_message("model", name, model_preset_names()));
  return it->second();
}

Result<std::string> cluster_preset_text(const std::string& name) {
  const auto& profiles = embedded_profiles();
  auto it = profiles.find(name);
  if (it == profiles.end()) return make_error(unknown_preset_message("cluster", name, cluster_preset_names()));
  return std::string(it->second);
}

Result<ClusterSpec> cluster_preset(const std::string& name) {
  auto text = cluster_preset_text(name);
  if (!text) return text.error();
  auto json = parse_json(*text, "profiles/" + name + ".json");
  if (!json) return json.error();
  return cluster_from_json(*json);
}

Result<ModelSpec> load_model(const std::string& name_or_path_given) {
  if (!looks_like_path(name_or_path_given)) return model_preset(name_or_path_given);
  // A downloaded Hugging Face checkpoint is a directory holding config.json (what from_pretrained reads).
  std::string name_or_path = name_or_path_given;
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_path, ec)) {
    const std::filesystem::path config = std::filesystem::path(name_or_path) / "config.json";
    if (!std::filesystem::is_regular_file(config, ec))
      return make_error(
          fmt::format("{}: a directory without a config.json (give a model JSON, a Hugging Face "
                      "config.json or a checkpoint directory holding one)",
                      name_or_path));
    name_or_path = config.string();
  }
  auto json = read_json_file(name_or_path);
  if (!json) return json.error();
  if (looks_like_hf_config(*json)) {
    const std::filesystem::path dir = std::filesystem::path(name_or_path).parent_path();
    auto model = model_from_hf_config(*json, dir.filename().string(), name_or_path);
    if (!model) return model.error();
    if (model->name.empty()) model->name = std::filesystem::path(name_or_path).stem().string();
    // A checkpoint stores each multi-token-prediction module as a layer past the last, with copies of the
    // word embedding and the LM head in it (DeepSeek-V3's model.layers.61.embed_tokens and .shared_head.head).
    const double mtp_stored =
        model->mtp_layers * (static_cast<double>(model->mtp_params()) + 2.0 * model->vocab * model->hidden);
    model->checkpoint_note =
        checkpoint_comparison(dir.empty() ? "." : dir, static_cast<double>(model->total_params()) + mtp_stored);
    return model;
  }
  auto model = model_from_json(*json);
  if (!model) return make_error(fmt::format("{}: {}", name_or_path, model.error().message));
  return model;
}

Result<ClusterSpec> load_cluster(const std::string& name_or_path) {
  if (!looks_like_path(name_or_path)) return cluster_preset(name_or_path);
  auto json = read_json_file(name_or_path);
  if (!json) return json.error();
  auto cluster = cluster_from_json(*json);
  if (!cluster) return make_error(fmt::format("{}: {}", name_or_path, cluster.error().message));
  return cluster;
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // Close enough to be a typo: at most a third of the name's letters wrong.
  if (best_distance == std::string::npos || best_distance > std::max<std::size_t>(2, name.size() / 3)) return {};
  return best;
}

}  // namespace loom
