// Parameter counts of the presets against the published sizes and GPT's closed form.
#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"

namespace loom {
namespace {

ModelSpec preset(const char* name) {
  auto m = model_preset(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

// Exact parameter counts of the released checkpoints (Hugging Face model cards / config.json
// shapes): LLaMA 2 7B is the "6.74 B" of the paper, and so on.
TEST(ModelSpec, PresetParameterCountsMatchReleasedCheckpoints) {
  EXPECT_EQ(preset("llama2-7b").total_params(), 6'738'415'616LL);
  EXPECT_EQ(preset("llama2-13b").total_params(), 13'015'864'320LL);
  EXPECT_EQ(preset("llama2-70b").total_params(), 68'976'648'192LL);
  EXPECT_EQ(preset("llama3-8b").total_params(), 8'030'261'248LL);
  EXPECT_EQ(preset("llama3-70b").total_params(), 70'553'706'496LL);
  EXPECT_EQ(preset("llama3-405b").total_params(), 405'853'388'800LL);
  EXPECT_EQ(preset("mistral-7b").total_params(), 7'241'732'096LL);
  EXPECT_EQ(preset("gpt2-small").total_params(), 124'439'808LL);
}

TEST(ModelSpec, Gpt3MatchesPublishedSizeAndClosedForm) {
  const ModelSpec m = preset("gpt3-175b");
  EXPECT_NEAR(m.total_params() / 1e9, 175.0, 0.5);  // Brown et al. 2020, Table 2.1
  // DESIGN.md: 12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h)), plus the final LayerNorm (2h).
  const double L = m.layers, h = m.hidden, V = m.vocab, s = m.seq_len;
  const double closed = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h)) + 2 * h;
  EXPECT_DOUBLE_EQ(static_cast<double>(m.total_params()), closed);
}

TEST(ModelSpec, FlopsMatchMegatronFormula) {
  // 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) per iteration without recompute (Narayanan et al. 2021).
  const ModelSpec m = preset("gpt3-175b");
  const double B = 1536, s = m.seq_len, L = m.layers, h = m.hidden, V = m.vocab;
  const double tokens = B * s;
  const double forward = L * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, m.seq_len)) +
                         m.lm_head_flops_fwd(tokens, m.vocab);
  const double megatron = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
  EXPECT_NEAR(3 * forward / megatron, 1.0, 1e-12);
}

TEST(ModelSpec, AnExplicitHeadDimSizesQueriesAndTheOutputProjection) {
  // Qwen3-32B's attention: hidden 5120, 64 query heads and 8 KV heads of 128 — Q is 8192 wide.
  ModelSpec m = preset("llama3-8b");
  m.hidden = 5120;
  m.heads = 64;
  m.kv_heads = 8;
  m.explicit_head_dim = 128;
  const double h = 5120, q = 64 * 128, kv = 8 * 128;
  EXPECT_EQ(m.q_dim(), 8192);
  EXPECT_EQ(m.attention_params(), static_cast<std::int64_t>(h * (q + 2 * kv) + q * h));
  const double tokens = 4096;
  const double mlp = 2.0 * tokens * 3.0 * h * m.ffn_hidden;
  EXPECT_DOUBLE_EQ(m.layer_linear_flops_fwd(tokens) - mlp, 2.0 * tokens * (h * (q + 2 * kv) + q * h));
  EXPECT_DOUBLE_EQ(m.layer_attention_flops_fwd(tokens, 4096), 4.0 * tokens * 4096 * q);
}

TEST(ModelSpec, VocabularyPaddedPerTensorParallelRank) {
  EXPECT_EQ(padded_vocab(50257, 1), 50304);
  EXPECT_EQ(padded_vocab(50257, 8), 51200);
  EXPECT_EQ(padded_vocab(51200, 8), 51200);
}

TEST(Presets, UnknownNameSuggestsTheNearest) {
  auto m = model_preset("llama2-7");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("did you mean 'llama2-7b'"), std::string::npos) << m.error().message;
  auto c = cluster_preset("dgx-a100-80g");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("dgx-a100-80gb"), std::string::npos) << c.error().message;
}

TEST(Presets, EveryClusterPresetParsesWithSourcesForItsFigures) {
  for (const auto& name : {"dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "local-cpu"}) {
    auto c = cluster_preset(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.error().message;
    EXPECT_GT(c->device.peak_flops, 0);
    EXPECT_GT(c->device.memory_bytes, 0);
    auto text = cluster_preset_text(name);
    ASSERT_TRUE(text.ok());
    EXPECT_NE(text->find("\"sources\""), std::string::npos) << name << " states no sources";
  }
  EXPECT_EQ(cluster_preset("dgx-a100-80gb")->gpus_per_node, 8);
  EXPECT_NEAR(cluster_preset("dgx-h100")->device.peak_flops, 989.4e12, 1e9);
  // FP8 and FP4 peaks where the tensor cores have them (dense, half the datasheets' sparse figures).
  EXPECT_EQ(cluster_preset("dgx-a100-80gb")->device.peak_fp8_flops, 0.0);
  EXPECT_DOUBLE_EQ(cluster_preset("dgx-h100")->device.peak_fp8_flops, 2 * 989.5e12);
  EXPECT_EQ(cluster_preset("dgx-h100")->device.peak_fp4_flops, 0.0);
  const ClusterSpec b200 = *cluster_preset("dgx-b200");
  EXPECT_DOUBLE_EQ(b200.device.peak_flops, 2.25e15);
  EXPECT_DOUBLE_EQ(b200.device.peak_fp8_flops, 2 * b200.device.peak_flops);
  EXPECT_DOUBLE_EQ(b200.device.peak_fp4_flops, 2 * b200.device.peak_fp8_flops);
  EXPECT_EQ(b200.gpus_per_node, 8);
  // A cost file written back keeps them.
  auto again = cluster_from_json(to_json(b200));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_DOUBLE_EQ(again->device.peak_fp4_flops, 9e15);
}

}  // namespace
}  // namespace loom
