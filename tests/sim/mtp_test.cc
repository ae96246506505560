// Multi-token prediction (ModelSpec::mtp_layers; DeepSeek-V3's and GLM-4.5's num_nextn_predict_layers,
// Megatron-core's --mtp-num-layers): each module's parameters, FLOPs, simulated cost and memory on the last
// pipeline stage, written out from the module's parts rather than from Loom's formulas.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/flops.h"
#include "core/json_io.h"
#include "core/partition.h"
#include "core/presets.h"
#include "planner/memory_model.h"
#include "sim/collectives.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"

namespace loom {
namespace {

// Llama 3 8B's shape with one MTP module, a dense model: the module's layer is a decoder layer.
ModelSpec with_mtp(int modules) {
  ModelSpec m = *model_preset("llama3-8b");
  m.mtp_layers = modules;
  return m;
}

TEST(MultiTokenPrediction, AModuleIsALayerAProjectionThreeNormsAndAHeadPass) {
  const ModelSpec plain = with_mtp(0), m = with_mtp(1);
  const double h = 4096;
  EXPECT_EQ(m.mtp_params(), m.layer_params(31) + static_cast<std::int64_t>(2 * h * h) + 3 * m.norm_params());
  EXPECT_EQ(m.total_params(), plain.total_params());  // the main model's size, as papers give it
  // FLOPs: the module's layer at full attention, eh_proj (2h → h) and the LM head again, 3× for the backward.
  const std::int64_t batch = 4;
  const int seq = 8192;
  const double tokens = static_cast<double>(batch) * seq;
  const double layer = plain.layer_linear_flops_fwd(tokens) + plain.layer_attention_flops_fwd(tokens, seq);
  const double module = layer + 2.0 * tokens * 2 * h * h + 2.0 * tokens * h * m.vocab;
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, batch, seq) - model_flops_per_step(plain, batch, seq), 3.0 * module);
  EXPECT_DOUBLE_EQ(model_flops_per_step(with_mtp(2), batch, seq) - model_flops_per_step(plain, batch, seq),
                   6.0 * module);
  // Full recomputation re-runs the module's layer as it does the decoder's; selective its attention core.
  EXPECT_DOUBLE_EQ(recompute_flops_per_step(m, batch, seq, Recompute::kFull) -
                       recompute_flops_per_step(plain, batch, seq, Recompute::kFull),
                   layer);
  EXPECT_DOUBLE_EQ(recompute_flops_per_step(m, batch, seq, Recompute::kSelective) -
                       recompute_flops_per_step(plain, batch, seq, Recompute::kSelective),
                   plain.layer_attention_flops_fwd(tokens, seq));
}

// DeepSeek-V3's module is an MoE layer (its last layer's kind): 11.6 B parameters, 14 B with the embedding and
// head copies DeepSeek's report counts beside it.
TEST(MultiTokenPrediction, DeepSeekV3ReadsItsModuleFromConfigJson) {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_mtp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "deepseek-v3.json").string();
  std::ofstream(path) << R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "max_position_embeddings": 163840, "vocab_size": 129280, "tie_word_embeddings": false,
    "num_nextn_predict_layers": 1,
    "rope_scaling": {"factor": 40, "original_max_position_embeddings": 4096, "type": "yarn"}})";
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->mtp_layers, 1);
  EXPECT_TRUE(m->mtp_layer_moe());
  EXPECT_NEAR(m->total_params() / 1e9, 671.0, 0.1);
  EXPECT_NEAR((m->mtp_params() + 2.0 * 129280 * 7168) / 1e9, 13.5, 0.1);
  auto back = model_from_json(to_json(*m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->mtp_layers, 1);
  for (const char* bad : {R"("num_nextn_predict_layers": 17)", R"("num_nextn_predict_layers": -1)"}) {
    std::ofstream(path) << R"({"model_type": "deepseek_v3", "hidden_size": 512, "intermediate_size": 1024,
      "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512, )"
                        << bad << "}";
    auto refused = load_model(path);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("'num_nextn_predict_layers'"), std::string::npos) << refused.error().message;
  }
  Json j = to_json(*m);
  j["mtp_layers"] = 17;
  auto too_many = model_from_json(j);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("'mtp_layers' = 17 is out of range [0, 16]"), std::string::npos)
      << too_many.error().message;
  std::filesystem::remove_all(dir);
}

// The last stage holds the module, and under a pipeline with an untied head the word embedding's copy the module
// looks its tokens up in; no other stage changes.
TEST(MultiTokenPrediction, TheLastStageHoldsTheModuleAndTheEmbeddingCopy) {
  const ModelSpec plain = with_mtp(0), m = with_mtp(1);
  ParallelConfig c{.tp = 2, .pp = 4};
  const double h = 4096, embedding = static_cast<double>(padded_vocab(m.vocab, 2)) * h / 2;
  // Its layer's linear weights and eh_proj split over TP, its five norms (the layer's two, enorm, hnorm, the
  // final one) on every rank.
  const double module = (static_cast<double>(m.attention_params() + m.mlp_params()) + 2 * h * h) / 2 +
                        5.0 * static_cast<double>(m.norm_params());
  for (int stage = 0; stage < 3; ++stage)
    EXPECT_DOUBLE_EQ(stage_params(m, c, stage).total(), stage_params(plain, c, stage).total()) << stage;
  EXPECT_DOUBLE_EQ(stage_params(m, c, 3).total() - stage_params(plain, c, 3).total(), module + embedding);
  c.pp = 1;
  c.dp = 4;
  EXPECT_DOUBLE_EQ(stage_params(m, c, 0).total() - stage_params(plain, c, 0).total(), module);
}

// The simulated last chunk runs the module's FLOPs, per micro-batch and TP rank, beside the main model's; its
// memory grows by the module's activations and its head pass's logits.
TEST(MultiTokenPrediction, TheLastStageComputesAndHoldsTheModule) {
  const ModelSpec plain = with_mtp(0), m = with_mtp(1);
  const ClusterSpec h100 = *cluster_preset("dgx-h100");
  const sim::CollectiveModel collectives(h100);
  TrainingSpec t{.gpus = 8, .global_batch = 8, .seq_len = 8192};
  ParallelConfig c{.tp = 2, .pp = 4, .micro_batch = 1};
  c.sequence_parallel = true;
  const sim::CostModel a(plain, t, c, h100, collectives), b(m, t, c, h100, collectives);
  const double tokens = 8192, h = 4096;
  const double padded = padded_vocab(m.vocab, 2);
  const double layer = plain.layer_linear_flops_fwd(tokens) + 0.5 * plain.layer_attention_flops_fwd(tokens, 8192);
  const sim::ChunkCost with = b.chunk(3, 0, false), without = a.chunk(3, 0, false);
  const double module_fwd = (layer + 2.0 * tokens * 2 * h * h + 2.0 * tokens * h * padded) / 2;
  // The causal kernel computes half the square: the flops the cost model counts are the kernel's.
  EXPECT_NEAR((with.forward.flops - without.forward.flops) / module_fwd, 1.0, 1e-9);
  EXPECT_GT(with.forward.seconds, without.forward.seconds);
  EXPECT_GT(with.backward.seconds, without.backward.seconds);
  for (int stage = 0; stage < 3; ++stage) {
    EXPECT_DOUBLE_EQ(b.chunk(stage, 0, false).forward.seconds, a.chunk(stage, 0, false).forward.seconds) << stage;
  }
  const MemoryReport mem_plain = estimate_memory(plain, t, c, h100), mem = estimate_memory(m, t, c, h100);
  for (int stage = 0; stage < 3; ++stage)
    EXPECT_DOUBLE_EQ(mem.stages[stage].total_bytes(), mem_plain.stages[stage].total_bytes()) << stage;
  // At least the module's layer and its fp32 logits (8192 tokens × the rank's vocabulary share) more.
  const double logits = 4.0 * tokens * padded / 2;
  EXPECT_GT(mem.stages[3].activations_bytes - mem_plain.stages[3].activations_bytes,
            logits + mem_plain.stages[3].activation_bytes_per_layer);
  auto slow = sim::simulate(m, t, c, h100), fast = sim::simulate(plain, t, c, h100);
  ASSERT_TRUE(slow.ok() && fast.ok());
  EXPECT_GT(slow->step_time_s, fast->step_time_s);
  EXPECT_GT(slow->model_flops, fast->model_flops);
}

}  // namespace
}  // namespace loom
