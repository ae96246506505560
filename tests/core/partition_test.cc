// Each pipeline stage's own mix of dense and MoE layers (core/partition.h): DeepSeek's leading dense
// layers land on the first stage, Qwen2-MoE's alternating ones everywhere; a stage's parameters are
// its own layers', and the stages' add up to the model's.
#include <gtest/gtest.h>

#include "core/partition.h"
#include "core/presets.h"

namespace loom {
namespace {

ModelSpec moe_model(int layers, int first_dense, int freq) {
  ModelSpec m = *model_preset("gpt-tiny");
  m.layers = layers;
  m.moe = MoeSpec{.experts = 8,
                  .experts_per_token = 2,
                  .expert_ffn = 64,
                  .shared_ffn = 64,
                  .first_dense_layers = first_dense,
                  .layer_freq = freq};
  return m;
}

TEST(Partition, EachStageCountsItsOwnDenseAndMoeLayers) {
  const ModelSpec deepseek_like = moe_model(12, 3, 1);
  const ParallelConfig pp4{.pp = 4};
  EXPECT_EQ(stage_layer_mix(deepseek_like, pp4, 0).dense, 3);
  EXPECT_EQ(stage_layer_mix(deepseek_like, pp4, 0).moe, 0);
  for (int s = 1; s < 4; ++s) EXPECT_EQ(stage_layer_mix(deepseek_like, pp4, s).moe, 3) << s;
  // Interleaved: chunk c of stage s is virtual stage c·pp + s, layers 3(c·pp + s) ..; the dense ones
  // are virtual stage 0's, stage 0's first chunk.
  const ParallelConfig vpp{.pp = 2, .vpp = 2, .schedule = Schedule::kInterleaved};
  EXPECT_EQ(chunk_layer_mix(deepseek_like, vpp, 0, 0).dense, 3);
  EXPECT_EQ(chunk_layer_mix(deepseek_like, vpp, 0, 1).moe, 3);
  EXPECT_EQ(stage_layer_mix(deepseek_like, vpp, 0).moe_fraction(), 0.5);
  EXPECT_EQ(stage_layer_mix(deepseek_like, vpp, 1).moe_fraction(), 1.0);
  // Every other layer MoE, after one dense: layers 1, 3, 5, ...
  const ModelSpec alternating = moe_model(8, 1, 2);
  EXPECT_EQ(stage_layer_mix(alternating, ParallelConfig{.pp = 2}, 0).moe, 2);
  EXPECT_EQ(stage_layer_mix(alternating, ParallelConfig{.pp = 2}, 1).moe, 2);
  // Uneven stages take their own layers too.
  const ParallelConfig listed{.pp = 2, .split = {.stage_layers = {2, 10}}};
  EXPECT_EQ(stage_layer_mix(deepseek_like, listed, 0).dense, 2);
  EXPECT_EQ(stage_layer_mix(deepseek_like, listed, 1).dense, 1);
  EXPECT_EQ(stage_layer_mix(deepseek_like, listed, 1).moe, 9);
}

TEST(Partition, StageParametersAreTheirOwnLayersAndAddUpToTheModel) {
  const ModelSpec m = moe_model(12, 3, 1);
  for (const ParallelConfig& c : {ParallelConfig{.pp = 4}, ParallelConfig{.tp = 2, .pp = 3, .ep = 2},
                                  ParallelConfig{.pp = 2, .vpp = 2, .schedule = Schedule::kInterleaved}}) {
    double layers = 0, experts = 0;
    for (int s = 0; s < c.pp; ++s) {
      const StageParams p = stage_params(m, c, s);
      layers += p.layers;
      experts += p.experts;
    }
    // The whole model's layers on a rank (the mean per layer times the layers).
    EXPECT_NEAR(layers, layer_params_per_rank(m, c.tp, c.ep, c.etp) * m.layers, 1e-6 * layers);
    EXPECT_NEAR(experts, routed_expert_params_per_rank(m, c) * m.layers, 1e-6 * experts);
  }
  // The first stage of four holds the 3 dense layers: fewer parameters than a stage of 3 MoE layers.
  const ParallelConfig pp4{.pp = 4};
  EXPECT_LT(stage_params(m, pp4, 0).layers, stage_params(m, pp4, 1).layers);
  EXPECT_EQ(stage_params(m, pp4, 0).experts, 0.0);
  ModelSpec dense = m;
  dense.moe = MoeSpec{};
  EXPECT_DOUBLE_EQ(stage_params(m, pp4, 0).layers, 3 * layer_params_per_tp_rank(dense, 1));
  ModelSpec all_moe = m;
  all_moe.moe.first_dense_layers = 0;
  EXPECT_DOUBLE_EQ(stage_params(m, pp4, 2).layers, 3 * layer_params_per_tp_rank(all_moe, 1));
}

}  // namespace
}  // namespace loom
