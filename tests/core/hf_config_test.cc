// Hugging Face config.json import: each family's field names, released models' configs read with their true
// parameter counts, and clear errors.
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"

namespace loom {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_hf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(HfConfig, Llama2ConfigMatchesPreset) {
  const std::string path = write_temp("config.json", R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "vocab_size": 32000})");
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->total_params(), model_preset("llama2-7b")->total_params());
  EXPECT_EQ(m->activation, Activation::kSwiGLU);
  EXPECT_EQ(m->norm, Norm::kRMSNorm);
}

TEST(HfConfig, MistralGqaConfig) {
  const std::string path = write_temp("mistral.json", R"({
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000})");
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kv_heads, 8);
  EXPECT_EQ(m->total_params(), model_preset("mistral-7b")->total_params());
}

TEST(HfConfig, Gpt2ConfigMatchesPreset) {
  const std::string path = write_temp("gpt2.json", R"({
    "model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})");
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->total_params(), model_preset("gpt2-small")->total_params());
}

TEST(HfConfig, MissingFieldIsNamed) {
  const std::string path = write_temp("broken.json", R"({
    "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096})");
  auto m = load_model(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("missing field 'intermediate_size'"), std::string::npos) << m.error().message;
  EXPECT_NE(m.error().message.find(path), std::string::npos);
}

TEST(HfConfig, MissingFileAndMalformedFile) {
  auto missing = load_model("/nonexistent/config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cannot open"), std::string::npos);
  auto malformed = load_model(write_temp("bad.json", "{ not json"));
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.error().message.find("malformed JSON"), std::string::npos);
}

// Released models' config.json files, and their true parameter counts, in ../shared/validation/hf_configs.
std::string released(const std::string& model) {
  return std::string(LOOM_VALIDATION_DIR) + "/hf_configs/" + model + "/config.json";
}

void expect_params_within_a_thousandth(const ModelSpec& m, const std::string& model) {
  auto table = read_json_file(std::string(LOOM_VALIDATION_DIR) + "/hf_configs/params.json");
  ASSERT_TRUE(table.ok()) << table.error().message;
  const double truth = (*table)["models"][model]["total"].get<double>();
  EXPECT_NEAR(static_cast<double>(m.total_params()) / truth, 1.0, 1e-3) << model << ": " << m.total_params();
}

TEST(HfConfig, Llama31PlansForItsPretrainingContextNotTheScaledOne) {
  for (const std::string model : {"llama-3.1-8b", "llama-3.1-405b"}) {
    auto m = load_model(released(model));
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->seq_len, 8192) << model;  // rope_scaling.original_max_position_embeddings, not 131072
    EXPECT_EQ(m->kv_heads, 8) << model;
    EXPECT_EQ(m->activation, Activation::kSwiGLU) << model;
    expect_params_within_a_thousandth(*m, model);
  }
  auto m = load_model(released("llama-3.1-8b"));
  EXPECT_EQ(m->ffn_hidden, 14336);
}

// A downloaded checkpoint is a directory: --model reads the config.json inside it, as from_pretrained
// does, and names the model after the directory, as for the file itself.
TEST(HfConfig, ACheckpointDirectoryReadsItsConfigJson) {
  const std::string dir = std::string(LOOM_VALIDATION_DIR) + "/hf_configs/llama-3.1-8b";
  for (const std::string& given : {dir, dir + "/"}) {
    auto from_dir = load_model(given);
    ASSERT_TRUE(from_dir.ok()) << given << ": " << from_dir.error().message;
    auto from_file = load_model(released("llama-3.1-8b"));
    ASSERT_TRUE(from_file.ok());
    EXPECT_EQ(from_dir->name, from_file->name) << given;
    EXPECT_EQ(from_dir->total_params(), from_file->total_params()) << given;
    EXPECT_EQ(from_dir->seq_len, 8192) << given;
  }
  const auto empty = std::filesystem::path(write_temp("placeholder.txt", "")).parent_path() / "empty_checkpoint";
  std::filesystem::create_directories(empty);
  auto m = load_model(empty.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("without a config.json"), std::string::npos) << m.error().message;
  EXPECT_NE(m.error().message.find(empty.string()), std::string::npos) << m.error().message;
}

// Sliding-window attention as each family states it: gpt-oss's layer_types, Gemma 2's every other layer,
// Gemma 3's sliding_window_pattern, Mistral's window on every layer, Qwen's only with use_sliding_window.
TEST(HfConfig, SlidingWindowsAsEachFamilyStatesThem) {
  auto gemma2 = load_model(released("gemma-2-9b"));
  ASSERT_TRUE(gemma2.ok()) << gemma2.error().message;
  EXPECT_EQ(gemma2->sliding_window, 4096);
  EXPECT_EQ(gemma2->sliding_layers, 21);  // layers 0, 2, ..., 40 of 42
  auto oss = load_model(released("gpt-oss-20b"));
  ASSERT_TRUE(oss.ok()) << oss.error().message;
  EXPECT_EQ(oss->sliding_window, 128);
  EXPECT_EQ(oss->sliding_layers, 12);  // "sliding_attention" 12 times in layer_types
  for (const std::string model : {"qwen1.5-moe-a2.7b", "mistral-nemo-12b", "mixtral-8x7b", "llama-3.1-8b"}) {
    auto m = load_model(released(model));  // use_sliding_window false, or sliding_window null or absent
    ASSERT_TRUE(m.ok()) << model;
    EXPECT_EQ(m->sliding_layers, 0) << model;
  }
  const std::string base = R"("hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_hidden_layers": 26, "vocab_size": 1000, "max_position_embeddings": 8192)";
  auto read = [&](const std::string& name, const std::string& fields) {
    return load_model(write_temp(name + ".json", "{" + base + ", " + fields + "}"));
  };
  auto mistral = read("mistral", R"("model_type": "mistral", "sliding_window": 4096)");
  ASSERT_TRUE(mistral.ok()) << mistral.error().message;
  EXPECT_EQ(mistral->sliding_layers, 26);
  auto gemma3 = read("gemma3", R"("model_type": "gemma3_text", "sliding_window": 512)");
  ASSERT_TRUE(gemma3.ok()) << gemma3.error().message;
  EXPECT_EQ(gemma3->sliding_layers, 26 - 4);  // every 6th layer (5, 11, 17, 23) attends globally
  EXPECT_EQ(gemma3->sliding_window, 512);
  auto qwen = read("qwen", R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 4096,
                              "max_window_layers": 20)");
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  EXPECT_EQ(qwen->sliding_layers, 6);  // layers 20-25
  auto gemma1 = read("gemma1", R"("model_type": "gemma", "head_dim": 64)");
  ASSERT_TRUE(gemma1.ok()) << gemma1.error().message;
  EXPECT_EQ(gemma1->sliding_layers, 0);
  auto chunked = read(
      "chunked", R"("model_type": "llama4_text", "sliding_window": 8192,
                                    "layer_types": [)" +
                     [] {
                       std::string list;
                       for (int i = 0; i < 26; ++i)
                         list +=
                             std::string(i ? ", " : "") + (i % 4 == 3 ? "\"full_attention\"" : "\"chunked_attention\"");
                       return list;
                     }() +
                     "]");
  ASSERT_TRUE(chunked.ok()) << chunked.error().message;  // Llama 4's chunks, as transformers 4.53+ lists them
  EXPECT_EQ(chunked->chunked_layers, 20);                // all but layers 3, 7, ..., 23
  EXPECT_EQ(chunked->attention_chunk, 8192);             // Llama4TextConfig's default attention_chunk_size
  EXPECT_EQ(chunked->sliding_layers, 0);
  auto unknown = read(
      "unknown", R"("model_type": "mistral", "sliding_window": 64, "layer_types": [)" + [] {
        std::string list = "\"dilated_attention\"";
        for (int i = 1; i < 26; ++i) list += ", \"full_attention\"";
        return list;
      }() + "]");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("layer type 'dilated_attention' is not one Loom models"), std::string::npos)
      << unknown.error().message;
  auto both = read("both", R"("model_type": "llama4_text", "sliding_window": 4096)");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("26 sliding-window and 20 chunked layers are more than the 26 layers"),
            std::string::npos)
      << both.error().message;
  auto short_list = read("short", R"("model_type": "gpt_oss", "sliding_window": 128,
                                     "layer_types": ["sliding_attention", "full_attention"])");
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.error().message.find("must list the 26 layers"), std::string::npos)
      << short_list.error().message;
}

TEST(HfConfig, Falcon7bReadsMultiQueryAndItsOwnFieldNames) {
  auto m = load_model(released("falcon-7b"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kv_heads, 1);  // multi_query, though num_kv_heads says 71
  EXPECT_EQ(m->ffn_hidden, 4 * 4544);
  EXPECT_EQ(m->seq_len, 2048);
  EXPECT_EQ(m->activation, Activation::kGelu);
  EXPECT_EQ(m->norm, Norm::kLayerNorm);
  EXPECT_FALSE(m->linear_bias);
  EXPECT_TRUE(m->tied_embeddings);
  expect_params_within_a_thousandth(*m, "falcon-7b");
}

TEST(HfConfig, SantacoderIsMultiQueryGptBigCode) {
  auto m = load_model(released("santacoder-gpt-bigcode"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kv_heads, 1);
  EXPECT_EQ(m->ffn_hidden, 8192);
  EXPECT_EQ(m->seq_len, 2048);
  EXPECT_EQ(m->activation, Activation::kGelu);
  expect_params_within_a_thousandth(*m, "santacoder-gpt-bigcode");
}

TEST(HfConfig, GptNeoxAndPhiHaveBiasesLayerNormAndAPlainGeluMlp) {
  for (const std::string model : {"gpt-neox-20b", "phi-2"}) {
    auto m = load_model(released(model));
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->kv_heads, m->heads) << model;
    EXPECT_EQ(m->activation, Activation::kGelu) << model;
    EXPECT_EQ(m->norm, Norm::kLayerNorm) << model;
    EXPECT_TRUE(m->linear_bias) << model;
    EXPECT_EQ(m->seq_len, 2048) << model;
    expect_params_within_a_thousandth(*m, model);
  }
}

TEST(HfConfig, GemmasGatedGeluMlpHasThreeMatricesAndATiedHead) {
  auto m = load_model(released("gemma-2b"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->activation, Activation::kSwiGLU);  // GeGLU, read with SwiGLU's shape
  EXPECT_TRUE(m->tied_embeddings);
  EXPECT_EQ(m->kv_heads, 1);
  EXPECT_EQ(m->ffn_hidden, 16384);
  expect_params_within_a_thousandth(*m, "gemma-2b");
}

TEST(HfConfig, ExplicitHeadDimWidensOrNarrowsAttentionAndCountsExactly) {
  // Qwen3-32B: 64 heads of 128 on hidden 5120; Mistral-Nemo: 32 of 128 on 5120; Gemma-2-9B: 16 of 256
  // on 3584. Q and the attention output are heads·head_dim wide, not hidden.
  const struct {
    const char* model;
    int head_dim;
  } cases[] = {{"qwen3-32b", 128}, {"mistral-nemo-12b", 128}, {"gemma-2-9b", 256}};
  for (const auto& c : cases) {
    auto m = load_model(released(c.model));
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->head_dim(), c.head_dim) << c.model;
    EXPECT_NE(m->q_dim(), m->hidden) << c.model;
    expect_params_within_a_thousandth(*m, c.model);
    // The model JSON keeps it: a saved model plans as the config did.
    auto back = model_from_json(to_json(*m));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->head_dim(), c.head_dim) << c.model;
    EXPECT_EQ(back->total_params(), m->total_params()) << c.model;
  }
}

double released_count(const std::string& model, const char* which) {
  auto table = read_json_file(std::string(LOOM_VALIDATION_DIR) + "/hf_configs/params.json");
  EXPECT_TRUE(table.ok());
  return table.ok() ? (*table)["models"][model][which].get<double>() : 0.0;
}

TEST(HfConfig, MixtureOfExpertsModelsCountTotalAndActiveParameters) {
  for (const std::string model : {"mixtral-8x7b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "gpt-oss-20b"}) {
    auto m = load_model(released(model));
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_TRUE(m->moe.active()) << model;
    EXPECT_NEAR(static_cast<double>(m->total_params()) / released_count(model, "total"), 1.0, 1e-3) << model;
    EXPECT_NEAR(static_cast<double>(m->active_params()) / released_count(model, "active_per_token"), 1.0, 1e-3)
        << model;
    // Loom's own model JSON keeps the structure: a saved model plans as the config did.
    auto back = model_from_json(to_json(*m));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->total_params(), m->total_params()) << model;
    EXPECT_EQ(back->active_params(), m->active_params()) << model;
  }
  auto mixtral = load_model(released("mixtral-8x7b"));
  EXPECT_EQ(mixtral->moe.experts, 8);
  EXPECT_EQ(mixtral->moe.experts_per_token, 2);
  EXPECT_EQ(mixtral->moe_layers(), 32);
  auto deepseek = load_model(released("deepseek-v2-lite"));
  EXPECT_TRUE(deepseek->mla.active());
  EXPECT_EQ(deepseek->mla.kv_lora_rank, 512);
  EXPECT_FALSE(deepseek->is_moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(deepseek->is_moe_layer(1));
  EXPECT_EQ(deepseek->moe.shared_ffn, 2 * 1408);
  auto qwen = load_model(released("qwen1.5-moe-a2.7b"));
  EXPECT_TRUE(qwen->moe.shared_gate);
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_FALSE(qwen->linear_bias);
}

// Llama 4 (modeling_llama4.py): each MoE layer holds routed experts and one shared expert, both
// intermediate_size wide, the dense layers an MLP intermediate_size_mlp wide, every
// interleave_moe_layer_step-th layer from step − 1 is MoE, and the RoPE layers (three of four) attend within
// chunks. The architecture fields below are Scout's and Maverick's text_config; the expected counts are the
// Hugging Face modules' weights written out here, not Loom's formula: per layer q, k, v, o (no biases), two
// RMSNorms, and the feed-forward — a MoE layer's experts (E·3·h·f), router (h·E) and shared expert (3·h·f),
// a dense layer's MLP (3·h·f_mlp) —, plus embedding, LM head (untied) and final norm. They come to 107.8 B
// and 400.7 B, 17.2 B active each, as Meta's model cards give them (109 B and 400 B total, 17 B active; the
// cards' totals hold the vision encoder, which Loom does not plan).
TEST(HfConfig, Llama4CountsItsSharedExpertDenseLayersAndChunks) {
  const auto config = [](int experts, int step) {
    return fmt::format(R"({{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
      "vision_config": {{"hidden_size": 1408, "num_hidden_layers": 34}},
      "text_config": {{"model_type": "llama4_text", "attention_bias": false, "attention_chunk_size": 8192,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": {},
        "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
        "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
        "num_key_value_heads": 8, "num_local_experts": {}, "rms_norm_eps": 1e-05,
        "rope_scaling": {{"factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
        "tie_word_embeddings": false, "use_qk_norm": true, "vocab_size": 202048}}}})",
                       step, experts);
  };
  const double h = 5120, f = 8192, f_mlp = 16384, vocab = 202048, layers = 48;
  const double attention = h * 40 * 128 * 2 + h * 8 * 128 * 2, norms = 2 * h;
  const double ends = 2 * vocab * h + h;
  for (const auto& [name, experts, step] : {std::tuple{"scout", 16, 1}, std::tuple{"maverick", 128, 2}}) {
    auto m = load_model(write_temp(std::string(name) + ".json", config(experts, step)));
    ASSERT_TRUE(m.ok()) << m.error().message;
    const double moe_layers = layers / step, dense_layers = layers - moe_layers;
    const double moe_ffn = experts * 3 * h * f + h * experts + 3 * h * f, dense_ffn = 3 * h * f_mlp;
    const double total = layers * (attention + norms) + moe_layers * moe_ffn + dense_layers * dense_ffn + ends;
    const double active =
        layers * (attention + norms) + moe_layers * (2 * 3 * h * f + h * experts) + dense_layers * dense_ffn + ends;
    EXPECT_EQ(static_cast<double>(m->total_params()), total) << name;
    EXPECT_EQ(static_cast<double>(m->active_params()), active) << name;
    EXPECT_NEAR(active / 1e9, 17.2, 0.05) << name;
    EXPECT_EQ(m->moe.shared_ffn, 8192) << name;
    EXPECT_FALSE(m->moe.shared_gate) << name;
    EXPECT_EQ(m->ffn_hidden, 16384) << name;
    EXPECT_EQ(m->moe_layers(), static_cast<int>(moe_layers)) << name;
    EXPECT_EQ(m->seq_len, 8192) << name;
    EXPECT_EQ(m->chunked_layers, 36) << name;  // all but layers 3, 7, ..., 47
    EXPECT_EQ(m->attention_chunk, 8192) << name;
    auto back = model_from_json(to_json(*m));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->total_params(), m->total_params()) << name;
    EXPECT_EQ(back->chunked_layers, 36) << name;
    EXPECT_EQ(back->attention_chunk, 8192) << name;
  }
}

// Which layers are MoE, as each family's modeling code decides it: Qwen2-MoE when (i + 1) % decoder_sparse_step
// == 0, DeepSeek when i ≥ first_k_dense_replace and i % moe_layer_freq == 0, Llama 4 at moe_layers (by default
// every interleave_moe_layer_step-th from step − 1). A listed pattern Loom cannot hold is refused.
TEST(HfConfig, MoeLayersSitWhereEachFamilyPutsThem) {
  const std::string base = R"("hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
    "num_hidden_layers": 7, "vocab_size": 1000, "max_position_embeddings": 512, "num_experts_per_tok": 2)";
  auto read = [&](const std::string& name, const std::string& fields) {
    return load_model(write_temp(name + ".json", "{" + base + ", " + fields + "}"));
  };
  auto moe_layers = [](const ModelSpec& m) {
    std::vector<int> out;
    for (int l = 0; l < m.layers; ++l)
      if (m.is_moe_layer(l)) out.push_back(l);
    return out;
  };
  auto qwen = read("qwen_step", R"("model_type": "qwen2_moe", "num_experts": 8, "decoder_sparse_step": 2)");
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  EXPECT_EQ(moe_layers(*qwen), (std::vector<int>{1, 3, 5}));
  auto deepseek = read("deepseek_freq", R"("model_type": "deepseek_v2", "n_routed_experts": 8, "moe_layer_freq": 2,
                                          "first_k_dense_replace": 1)");
  ASSERT_TRUE(deepseek.ok()) << deepseek.error().message;
  EXPECT_EQ(moe_layers(*deepseek), (std::vector<int>{2, 4, 6}));
  auto deepseek_v3 = read("deepseek_v3", R"("model_type": "deepseek_v3", "n_routed_experts": 8, "moe_layer_freq": 1,
                                           "first_k_dense_replace": 3)");
  ASSERT_TRUE(deepseek_v3.ok()) << deepseek_v3.error().message;
  EXPECT_EQ(moe_layers(*deepseek_v3), (std::vector<int>{3, 4, 5, 6}));
  auto llama4 = read("llama4_listed", R"("model_type": "llama4_text", "num_local_experts": 8,
                                         "interleave_moe_layer_step": 3, "moe_layers": [2, 5])");
  ASSERT_TRUE(llama4.ok()) << llama4.error().message;
  EXPECT_EQ(moe_layers(*llama4), (std::vector<int>{2, 5}));
  auto odd = read("llama4_odd", R"("model_type": "llama4_text", "num_local_experts": 8, "moe_layers": [0, 3])");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("'moe_layers' [0,3] are not the layers from 0 at a step of 1"), std::string::npos)
      << odd.error().message;
}

// ERNIE 4.5 (modeling_ernie4_5_moe.py) names its experts moe_num_experts / moe_k / moe_num_shared_experts and
// makes layer i sparse when (i + 1) % moe_layer_interval == 0 and moe_layer_start_index ≤ i ≤
// moe_layer_end_index. The fields are ERNIE-4.5-21B-A3B's; the expected counts are its modules' weights written
// out (per layer q, k, v, o, two RMSNorms; a MoE layer's 64 experts of 3·h·f, router h·64 and the shared MLP
// 3·h·2f; the dense first layer 3·h·12288; the tied embedding and final norm): 21.8 B, 3.35 B active, which
// Baidu's card gives as 21 B and 3 B.
TEST(HfConfig, Ernie45ReadsItsOwnExpertFields) {
  const auto config = [](const std::string& end) {
    return R"({"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_size": 2560,
      "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 28,
      "num_attention_heads": 20, "num_key_value_heads": 4, "head_dim": 128, "moe_num_experts": 64, "moe_k": 6,
      "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": )" +
           end + R"(, "moe_layer_interval": 1, "hidden_act": "silu", "max_position_embeddings": 131072,
      "vocab_size": 103424, "tie_word_embeddings": true, "rms_norm_eps": 1e-05, "use_bias": false})";
  };
  const double h = 2560, f = 1536, vocab = 103424, layers = 28;
  const double attention = h * 20 * 128 * 2 + h * 4 * 128 * 2, norms = 2 * h;
  const double routed = 3 * h * f, moe_rest = h * 64 + 3 * h * 2 * f, dense = 3 * h * 12288;
  const double ends = vocab * h + h;
  for (const std::string end : {"27", "-1"}) {
    auto m = load_model(write_temp("ernie" + end + ".json", config(end)));
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->moe.experts, 64);
    EXPECT_EQ(m->moe.experts_per_token, 6);
    EXPECT_EQ(m->moe.shared_ffn, 2 * 1536);
    EXPECT_FALSE(m->is_moe_layer(0));
    EXPECT_TRUE(m->is_moe_layer(1));
    EXPECT_TRUE(m->is_moe_layer(27));
    EXPECT_EQ(static_cast<double>(m->total_params()),
              layers * (attention + norms) + 27 * (64 * routed + moe_rest) + dense + ends);
    EXPECT_EQ(static_cast<double>(m->active_params()),
              layers * (attention + norms) + 27 * (6 * routed + moe_rest) + dense + ends);
    EXPECT_NEAR(static_cast<double>(m->total_params()) / 1e9, 21.8, 0.05);
    EXPECT_NEAR(static_cast<double>(m->active_params()) / 1e9, 3.35, 0.05);
  }
  // An interval of 2 from layer 1: layers 1, 3, 5, ... (i + 1 even); dense layers after the last MoE one are
  // not a pattern Loom holds.
  std::string every_other = config("-1");
  every_other.replace(every_other.find(R"("moe_layer_interval": 1)"), 23, R"("moe_layer_interval": 2)");
  auto m = load_model(write_temp("ernie_interval.json", every_other));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_FALSE(m->is_moe_layer(0));
  EXPECT_TRUE(m->is_moe_layer(1));
  EXPECT_FALSE(m->is_moe_layer(2));
  EXPECT_TRUE(m->is_moe_layer(27));
  EXPECT_EQ(m->moe_layers(), 14);
  auto short_range = load_model(write_temp("ernie_end.json", config("20")));
  ASSERT_FALSE(short_range.ok());
  EXPECT_NE(short_range.error().message.find("'moe_layer_end_index' 20 leaves dense layers after the MoE ones"),
            std::string::npos)
      << short_range.error().message;
}

// Configs Loom would misread are refused in one line naming what gave them away: layers that are not attention
// (Qwen3-Next's Gated DeltaNet, Jamba's and Nemotron-H's Mamba blocks), and experts in fields no family Loom
// reads uses (read as a dense model, they would vanish).
TEST(HfConfig, ConfigsLoomWouldMisreadAreRefusedNamingTheField) {
  const std::string base = R"("hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_hidden_layers": 4, "vocab_size": 1000, "max_position_embeddings": 512)";
  const std::pair<std::string, std::string> cases[] = {
      {R"("model_type": "qwen3_next", "full_attention_interval": 4)", "model_type 'qwen3_next' mixes attention"},
      {R"("model_type": "jamba", "attn_layer_period": 8)", "model_type 'jamba' mixes attention"},
      {R"("model_type": "my_hybrid", "full_attention_interval": 4)", "'full_attention_interval' describes"},
      {R"("model_type": "my_hybrid", "hybrid_override_pattern": "M-M*")", "'hybrid_override_pattern' describes"},
      {R"("model_type": "my_hybrid", "mamba_d_state": 128)", "'mamba_d_state' describes"},
      {R"("model_type": "llama", "layer_types": ["full_attention", "linear_attention", "full_attention",
         "linear_attention"])",
       "layer type 'linear_attention' is not one Loom models"},
      {R"("model_type": "hunyuan", "num_expert": 64, "moe_topk": 8)",
       "'num_expert' describes experts in a field Loom does not read"},
      {R"("model_type": "my_moe", "ffn_experts": [8, 8])", "'ffn_experts' describes experts"},
  };
  int i = 0;
  for (const auto& [fields, expected] : cases) {
    auto m = load_model(write_temp("misread" + std::to_string(i++) + ".json", "{" + fields + ", " + base + "}"));
    ASSERT_FALSE(m.ok()) << fields;
    EXPECT_NE(m.error().message.find(expected), std::string::npos) << m.error().message;
  }
  // A dense config with a zero or null expert field is still dense.
  for (const std::string fields :
       {R"("model_type": "llama", "num_experts": 0, "num_experts_per_tok": 2)",
        R"("model_type": "llama", "moe_num_experts": null)", R"("model_type": "llama", "shared_expert_count": 0)"}) {
    auto m = load_model(write_temp("dense" + std::to_string(i++) + ".json", "{" + fields + ", " + base + "}"));
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_FALSE(m->moe.active()) << fields;
  }
}

// QK-norm as each family's attention builds it. Qwen3-32B's released count is Loom's exactly once its q_norm and
// k_norm (head_dim each, per layer) are counted: 256 parameters a layer were all that was missing. OLMo 2's
// norms span all of Q's and K's width (Olmo2Attention: RMSNorm(heads·head_dim), RMSNorm(kv_heads·head_dim));
// its fields are OLMo-2-1124-7B's, its count written out (7.30 B, as AI2's card gives it).
TEST(HfConfig, QkNormAsEachFamilyBuildsIt) {
  auto qwen = load_model(released("qwen3-32b"));
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  EXPECT_EQ(qwen->qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(static_cast<double>(qwen->total_params()), released_count("qwen3-32b", "total"));
  auto olmo = load_model(write_temp("olmo2.json", R"({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
    "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-06,
    "rope_theta": 500000, "vocab_size": 100352, "tie_word_embeddings": false, "attention_bias": false})"));
  ASSERT_TRUE(olmo.ok()) << olmo.error().message;
  EXPECT_EQ(olmo->qk_norm, QkNorm::kFullWidth);
  const double h = 4096, layer = 4 * h * h + 2 * h + 3 * h * 11008 + 2 * h;
  EXPECT_EQ(static_cast<double>(olmo->total_params()), 32 * layer + 2 * 100352 * h + h);
  EXPECT_NEAR(static_cast<double>(olmo->total_params()) / 1e9, 7.30, 0.005);
  const std::string glm = R"({"model_type": "glm4_moe", "hidden_size": 512, "intermediate_size": 1024,
    "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512, )";
  for (const auto& [flag, expected] : {std::pair{"false", QkNorm::kNone}, std::pair{"true", QkNorm::kPerHead}}) {
    auto m = load_model(write_temp(std::string("glm_") + flag + ".json", glm + R"("use_qk_norm": )" + flag + "}"));
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->qk_norm, expected) << flag;
  }
  auto llama = load_model(released("llama-3.1-8b"));
  ASSERT_TRUE(llama.ok()) << llama.error().message;
  EXPECT_EQ(llama->qk_norm, QkNorm::kNone);
}

TEST(HfConfig, ActiveExpertsSetTheMatmulFlops) {
  // Mixtral: a token passes through 2 of 8 experts, so a layer's matmul FLOPs are 2 per weight of its
  // attention, router and two experts — not of all eight.
  auto m = load_model(released("mixtral-8x7b"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  const double h = 4096, f = 14336;
  const double attention = h * (4096 + 2 * 1024) + 4096 * h, router = h * 8, experts = 2 * 3 * h * f;
  EXPECT_DOUBLE_EQ(m->layer_linear_flops_fwd(1.0), 2.0 * (attention + router + experts));
}

TEST(HfConfig, UnknownActivationIsAnErrorNamingIt) {
  const std::string path = write_temp("relu3.json", R"({"model_type": "llama", "hidden_act": "relu3",
    "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 2,
    "vocab_size": 1000, "max_position_embeddings": 512})");
  auto m = load_model(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("hidden_act 'relu3' is not an activation Loom knows"), std::string::npos)
      << m.error().message;
}

TEST(HfConfig, FalconNewDecoderArchitectureReadsNHeadKv) {
  const std::string path = write_temp("falcon40b.json", R"({"model_type": "falcon", "new_decoder_architecture": true,
    "hidden_size": 8192, "n_head": 128, "n_head_kv": 8, "n_layer": 60, "vocab_size": 65024})");
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kv_heads, 8);
  EXPECT_EQ(m->layers, 60);
  EXPECT_EQ(m->heads, 128);
  EXPECT_EQ(m->ffn_hidden, 4 * 8192);
}

TEST(HfConfig, GqaFieldVariantsAndMultiQuery) {
  auto with = [](const std::string& file, const std::string& extra) {
    return load_model(write_temp(file, R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
      "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512)" +
                                           extra + "}"));
  };
  EXPECT_EQ(with("kv1.json", R"(, "num_kv_heads": 2)")->kv_heads, 2);
  EXPECT_EQ(with("kv2.json", R"(, "n_head_kv": 4)")->kv_heads, 4);
  EXPECT_EQ(with("kv3.json", R"(, "multi_query": true)")->kv_heads, 1);
  EXPECT_EQ(with("kv4.json", "")->kv_heads, 8);
}

TEST(HfConfig, GptBigCodeWithNullInnerWidthUsesFourTimesHidden) {
  const std::string path = write_temp("bigcode.json", R"({"model_type": "gpt_bigcode", "n_embd": 256, "n_head": 4,
    "n_layer": 2, "n_inner": null, "n_positions": 512, "vocab_size": 1000})");
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->ffn_hidden, 1024);
  EXPECT_EQ(m->kv_heads, 1);  // GPTBigCodeConfig's multi_query defaults to true
}

TEST(HfConfig, MultimodalConfigReadsTheTextModel) {
  const std::string path = write_temp("llava.json", R"({"model_type": "llava", "architectures": ["Llava"],
    "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24},
    "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
      "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000}})");
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->total_params(), model_preset("llama2-7b")->total_params());
}

TEST(HfConfig, WrongTypesAreErrorsNamingTheField) {
  const std::string base = R"("hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512)";
  const std::pair<std::string, std::string> cases[] = {
      {R"("model_type": 5)", "'model_type' must be a string"},
      {R"("model_type": "llama", "hidden_dropout": null)", "'hidden_dropout' is null"},
      {R"("model_type": "llama", "attention_dropout": "0.1")", "'attention_dropout' must be a number"},
      {R"("model_type": "llama", "rope_scaling": 4)", "rope_scaling: expected a JSON object"},
      {R"("model_type": "llama", "multi_query": "yes")", "'multi_query' must be true or false"},
      {R"("model_type": "llama", "text_config": [])", "'text_config' must be an object"},
  };
  int i = 0;
  for (const auto& [fields, expected] : cases) {
    auto m = load_model(write_temp("wrong" + std::to_string(i++) + ".json", "{" + fields + ", " + base + "}"));
    ASSERT_FALSE(m.ok()) << fields;
    EXPECT_NE(m.error().message.find(expected), std::string::npos) << m.error().message;
  }
}

}  // namespace
}  // namespace loom
