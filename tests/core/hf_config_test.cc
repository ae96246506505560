// Hugging Face config.json import: LLaMA/Mistral and GPT-2 field names, and clear errors.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace loom
